"""One trial, end to end: the pipeline and its two backends (a live engine
process, the simulated engine in virtual time), the capacity search,
the quality gate, and the Ray task that runs it on a GPU node."""
