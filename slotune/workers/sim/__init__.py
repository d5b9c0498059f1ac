"""A simulated vLLM V1 engine: one model on one GPU type, driven by vLLM's own flags.

The core is a pure discrete-event model (scheduler, KV blocks, prefix cache, step-time
cost model). Two drivers run it: :func:`~slotune.workers.sim.virtual_time.simulate` in virtual
time, and the real-time driver behind the OpenAI-compatible HTTP server
(``python -m slotune.workers.sim serve``).
"""
