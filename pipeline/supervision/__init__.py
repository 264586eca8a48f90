"""The env side's hold on its worker processes: starting them (launcher),
watching and restarting them (supervisor, stream; their lifecycle and
restart policy in lifecycle), their resource facts
(stats) and closing every recorder on SIGTERM/SIGINT (signals).

Never imported by ``envrec.workers``; only the launcher names ``envrec.workers``,
and only as the module a fresh interpreter runs.
"""
