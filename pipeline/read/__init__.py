"""The read side: ``TraceReader`` and its episodes, the batch files behind them
and the summary ``envrec inspect`` prints. Reads what any process wrote,
including folders envrec did not write.
"""
