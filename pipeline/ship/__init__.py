"""Recordings shipped off the node: a recording's committed batches and finished clips copied to object storage.

``python -m envrec.ship`` is a recorder's shipper process (started by
``envrec.supervision.shipper`` when a recorder has ``ship_to``), and ``envrec
ship DIR URL`` ships a folder that exists already (``command``). Per folder
pass (``shipping``): each trace recording (``recording``) and each video
recorder's clips (``clips``) is claimed under the store, then shipped unit by
unit — immutable objects, a Parquet index (``index``), a commit document
written create-only — with a local ledger of what is shipped. ``follow``
repeats passes as the recording goes and waits out a store that does not
answer; ``counters`` are its figures, shared with the env process. The
layout under the URL is ``envrec.formats.shipped``; readers are in
``envrec.read.dataset``.
"""
