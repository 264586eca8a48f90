"""The env side's hold on its worker processes: starting them (launcher),
watching them (supervisor, their lifecycle in lifecycle), one ring and its
worker under a policy (stream), replacing failed ones (restarts), what a
stream counts (counters), their resource facts (stats), and closing every
recorder still open at exit (closers) or on SIGTERM/SIGINT (signals).

Never imported by ``envrec.workers``; only the launcher names ``envrec.workers``,
and only as the module a fresh interpreter runs.
"""
