"""What envrec writes to disk and how it reads it back, independent of who does:
the trace format (manifest, batch index, checks of what a stranger's folder
holds), clip metadata, compression codecs, space schemas, info encoding,
atomic files and folder confinement.

Both sides import this package; it imports nothing of envrec but itself and
the leaves at the top (``errors``, ``option_checks``).
"""
