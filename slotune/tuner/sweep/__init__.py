"""The sweep machinery: what a sweep is asked to do (``request``), the coordinator that
claims and runs sweeps and the parts its runner wires — the study, the launcher of
trials and where they go (``executors``, ``placement``), quality baselines,
confirmation, the outbox that records results, progress and the sweep's log."""
