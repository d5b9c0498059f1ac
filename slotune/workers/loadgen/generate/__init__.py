"""What a run sends: datasets, arrival schedules, token ids,
multi-turn sessions, traces and workload files."""
