"""A reader of a folder under a memory limit: what a bomb costs a reader that has only ``MIB`` MiB.

Usage: python child_bounded_reader.py FOLDER READER MIB

``READER``: ``reader`` (``TraceReader`` iterated, every observation's bytes touched), ``skip``
(``on_damaged="skip"``), ``parquet`` (``to_parquet`` into ``FOLDER.out``), ``inspect`` or ``viewer`` (the
catalog's lazy listing: each recording's page of episodes, then each episode's plot data; a ``TraceError``
there, answered 422 by the server, is listed with ``damaged``). The address space
is limited with ``RLIMIT_AS`` before envrec is imported. Prints one JSON line: ``outcome`` (``"read"`` or
``"TraceError"``), ``seconds``, ``message``, ``damaged`` (skip, viewer), ``code`` (inspect's exit status). Any other
exception (a ``MemoryError``) escapes as a traceback, an abort in C++ kills the process: the parent sees both.
"""

import json
import resource
import sys
import time

folder, reader, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))

import envrec  # after the limit: importing is part of what must fit

out: dict = {"outcome": "read", "message": ""}
start = time.monotonic()
try:
    if reader == "reader":
        for ep in envrec.TraceReader(folder):
            bytes(memoryview(ep.observations))
    elif reader == "skip":
        r = envrec.TraceReader(folder, on_damaged="skip")
        list(r)
        out["damaged"] = [d.reason for d in r.damaged]
    elif reader == "parquet":
        from envrec.export import to_parquet

        to_parquet(folder, folder + ".out")
    elif reader == "viewer":
        from envrec.viewer.catalog import Catalog

        catalog = Catalog(folder)
        refused = []
        for r in catalog.summary()["recordings"]:
            for ep in catalog.episodes(r["name"], 0, 1000, "-length")["episodes"]:
                try:  # an episode's page: its arrays decompressed
                    catalog.episode(r["name"], ep["episode_id"], first_step=ep["first_step"])
                except envrec.TraceError as exc:  # the server answers 422 and goes on
                    refused.append(str(exc))
        out["damaged"] = [d["error"] for d in catalog.summary()["damaged"]] + refused
    elif reader == "inspect":
        from envrec.cli import main

        out["code"] = main(["inspect", folder])
except envrec.TraceError as exc:
    out.update(outcome="TraceError", message=str(exc))
out["seconds"] = time.monotonic() - start
print(json.dumps(out), flush=True)
