"""The contract both processes share: the ring in shared memory (its layout, the
env's writer and the worker's reader), the wakeup eventfd, the record layouts,
the configs, status words and worker-loop handler (``protocol.Handler``) of the
protocol, fault specs and process facts.

Both sides import this package; it imports only ``envrec.formats`` and the
leaves at the top (``errors``, ``option_checks``).
"""
