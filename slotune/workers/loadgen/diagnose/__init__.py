"""Why a run failed its SLO: the diagnosis from timings and the
engine's metrics, and the symptoms named from it."""
