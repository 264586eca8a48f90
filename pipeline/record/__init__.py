"""The env side that users wrap their environments in: the Gymnasium wrappers,
the vector wrappers, the trace and video recorders (and the clip state of the
latter), the packer that turns a step into ring records, clip triggers and
the commit watcher.

Never imported by ``envrec.workers``.
"""
