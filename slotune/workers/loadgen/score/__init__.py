"""What a run's timings say: SLO scoring and a capacity
probe's statistical verdict."""
