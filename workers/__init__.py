"""The worker side of envrec: code that runs in the worker processes.

Imports go one way: ``envrec.workers`` uses the shared parts of ``envrec``
(ring, records, schema, atomic files), never the env-side recorder.
"""

from .entry import encoder_main, serializer_main

__all__ = ["encoder_main", "serializer_main"]
