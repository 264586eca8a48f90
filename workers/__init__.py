"""The worker side of envrec: code that runs in the worker processes.

Each role's object (``serializer.Serializer``, ``vector_serializer.VectorSerializer``,
``encoder.Encoder``) is an ``envrec.contract.protocol.Handler``, driven by the
worker loop of ``loop``. Imports go one way: ``envrec.workers`` uses
``envrec.contract`` (what both processes share), ``envrec.formats`` (what is on
disk) and the leaves of ``envrec``, never the env side.
"""

from .loop import encoder_main, serializer_main

__all__ = ["encoder_main", "serializer_main"]
