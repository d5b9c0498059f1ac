"""slotune: SLO-constrained search for LLM serving configurations.

``slotune.tuner`` is the control plane (spaces, sweeps, strategies and the twin,
planning, report, storage, API, CLI); ``slotune.workers`` the data plane (the
contracts, trials, engines, the load generator, the simulated engine). The data
plane never imports the control plane (``lint-imports`` checks it).
"""
