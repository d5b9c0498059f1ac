"""Planning from what sweeps measured: capacity plans (``planner``), their one-line
answers (``answer``), any SLO read off stored probes (``rescore``) and the trade-off
frontier (``frontier``)."""
