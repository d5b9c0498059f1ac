"""What vLLM prints while it starts or dies, and what the adapters read from it.

vLLM logs one line per event, behind a prefix such as
``(EngineCore pid=6196) INFO 12-01 11:07:55 [kv_cache_utils.py:2327] ``. Real lines of
vLLM 0.32.0 are kept in ``tests/fixtures/vllm/``; the older wordings below are still read,
so a log of an older release gives the same facts.

Start-up facts (:func:`parse_startup_log`):

* **version**: ``Initializing a V1 LLM engine (v0.32.0) with config: …`` (the engine
  core); older releases: ``vLLM API server version 0.11.0``; the start-up banner
  (``█  version 0.32.0``) when the engine core never started.
* **KV capacity**, one line: ``GPU KV cache size: 437,392 tokens, Maximum concurrency
  for 32,768 tokens per request: 13.35x`` (``CPU KV cache size`` on the CPU build,
  ``GPU + host`` with a host pool); older releases print the two halves on two lines.
* **phases** (seconds): ``Initializing model took 0.143670 seconds``; ``Loading weights
  took 3.21 seconds``; ``Model loading took 15.27 GiB memory and 4.012 seconds`` (older:
  ``… GiB and …``); ``torch.compile took 21.5 s in total`` (older: ``takes``);
  ``Graph capturing finished in 12 secs, took 0.53 GiB``; ``init engine (profile, create
  kv cache, warmup model) took 0.62 s`` (older: ``… took 41.62 seconds``), with
  ``(compilation: 20.00 s)`` after it when vLLM compiled, kept as its own phase;
  ``Directly load the compiled graph(s) for … from the cache, took 2.345 s`` when a GPU
  build found its compiled graphs in the cache. The CPU build compiles in its own
  warm-up and prints no compile time: ``Warming up model for the compilation...`` and
  ``Warming up done.``, whose timestamps (whole seconds) give ``compile_warmup``.
* ``CUDA_VISIBLE_DEVICES=…`` where the engine prints the devices it saw (the simulator).

:func:`boot_phases` turns those raw phases and the measured boot into the trial's
``timings`` boot split (``boot_weights_s`` … ``boot_server_ready_s``).

Why it died (:func:`classify_failure`, :func:`error_sentence`): vLLM's configuration
classes are pydantic dataclasses, so a refused argument ends start-up with a
``pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig``
whose next line holds vLLM's sentence, ``Value error, max_num_batched_tokens (32) must be
greater than or equal to max_num_seqs (64). [type=value_error, …]``, or, for a field
bound, the field's name and ``Input should be less than or equal to 1 [type=…]``. Older
releases raised ``ValueError: <sentence>``. Memory shortfalls are a ``ValueError`` or
``torch.OutOfMemoryError`` in the engine core, then ``EngineCore failed to start.``

What a build does not implement is a refusal too, whenever it shows: vLLM raises
``NotImplementedError`` where a platform lacks a piece a configuration needs, and the
configuration never runs there. The CPU build boots two data-parallel ranks of a
mixture-of-experts model and dies at the first request, in its CPU communicator's
``all_gatherv`` (``tests/fixtures/vllm/refused_cpu_moe_data_parallel.log``); often the
error is bare, so its sentence names the function and file that raised it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from slotune.workers.contracts import FailureClass

# Log lines that say why an engine died, most specific first.
_OOM_PATTERNS = (
    "CUDA out of memory", "OutOfMemoryError", "No available memory for the cache blocks",
    "KV cache is needed, which is larger than the available KV cache memory",
    "Free memory on device", "Failed to load model - not enough GPU memory",
    "Cannot auto-fit max_model_len: not enough GPU memory",
)
_INVALID_PATTERNS = (
    "must be greater than or equal to max_num_seqs", "is smaller than max_model_len",
    "is greater than the derived max_model_len", "must be divisible by tensor parallel size",
    "without speculative model", "requires 'model' to contain the custom proposer",
    "Unknown quantization method", "GPU memory utilization must be",
    # The CPU build binds each rank's threads to a NUMA node of its own (TP/PP/DP ranks).
    "Not enough allowed NUMA nodes to bind threads",
    # Any other refusal by one of vLLM's pydantic config classes.
    "Value error, ", "Input should be", "validation error for",
    "error: argument", "unrecognized arguments", "invalid choice", "ValueError",
)


_NOT_IMPLEMENTED = "NotImplementedError"
_FRAME = re.compile(r'File "(?:.*?/site-packages/)?(?P<file>[^"]+)", line (?P<line>\d+), '
                    r"in (?P<function>\w+)")


def classify_failure(log_text: str, *, during: str) -> FailureClass:
    """What kind of failure a dead engine's log shows (``during``: startup or measure)."""
    if any(p in log_text for p in _OOM_PATTERNS):
        return "oom"
    if _NOT_IMPLEMENTED in log_text:
        return "invalid_config"  # the build cannot run this configuration, at any time
    if during == "startup" and any(p in log_text for p in _INVALID_PATTERNS):
        return "invalid_config"
    return "crashed"


_LOG_PREFIX = re.compile(
    r"^(?:\([\w -]+ pid=\d+\)\s+)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
    r"\[[^\]]*\]\s+)?")
_PYDANTIC_TRAILER = re.compile(r"\s*\[type=[\w.]+(?P<rest>,.*)?\]$")
_INPUT_VALUE = re.compile(r"input_value=(?P<value>[^,\]]*)")
_ERROR_WORD = re.compile(r"\b\w*(?:Error|Exception)\b|\berror\b")
_NOT_A_SENTENCE = ("File \"", "Traceback (most recent call last)", "For further information visit",
                   "^")


def _sentence(lines: list[str], index: int) -> str:
    """Line ``index`` without vLLM's log prefix or pydantic's ``[type=…]`` trailer."""
    line = _LOG_PREFIX.sub("", lines[index])
    trailer = _PYDANTIC_TRAILER.search(line)
    if trailer is None:
        return line
    line = line[:trailer.start()]
    if line.startswith("Input should be") and index > 0:
        # A field bound: pydantic names the field on the line before.
        field = _LOG_PREFIX.sub("", lines[index - 1])
        value = _INPUT_VALUE.search(trailer.group("rest") or "")
        got = f" (got {value.group('value')})" if value is not None else ""
        line = f"{field}: {line}{got}"
    return line


def error_sentence(text: str) -> str:
    """The line that best says why an engine died, as vLLM worded it.

    A known cause first (vLLM's sentence, without the log prefix or pydantic's trailer),
    else the last line naming an error that is not traceback scaffolding, else the last
    line.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pattern in _OOM_PATTERNS:
        for i in range(len(lines) - 1, -1, -1):
            if pattern in lines[i]:
                return _sentence(lines, i)
    unsupported = _not_implemented(lines)
    if unsupported is not None:
        return unsupported
    for pattern in _INVALID_PATTERNS:
        for i in range(len(lines) - 1, -1, -1):
            if pattern in lines[i]:
                return _sentence(lines, i)
    for i in range(len(lines) - 1, -1, -1):
        if _ERROR_WORD.search(lines[i]) and not lines[i].startswith(_NOT_A_SENTENCE):
            return _sentence(lines, i)
    return _sentence(lines, len(lines) - 1) if lines else "(no output)"


def _not_implemented(lines: list[str]) -> str | None:
    """The first ``NotImplementedError`` line, with the frame that raised it when the
    error carries no message of its own."""
    for i, line in enumerate(lines):
        if _NOT_IMPLEMENTED not in line:
            continue
        sentence = _sentence(lines, i)
        if not sentence.startswith(_NOT_IMPLEMENTED):
            continue  # a line that mentions it (a traceback's code), not the error
        if sentence.strip() != _NOT_IMPLEMENTED:
            return sentence
        for j in range(i - 1, -1, -1):
            frame = _FRAME.search(lines[j])
            if frame is not None:
                return (f"{_NOT_IMPLEMENTED} in {frame['function']} ({frame['file']}, "
                        f"line {frame['line']})")
        return sentence
    return None


# Each fact and phase: vLLM's current words first, then older releases'.
_FACT_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "kv_cache_tokens": (re.compile(r"\b[A-Z]+(?: \+ host)? KV cache size: ([\d,]+) tokens"),),
    "max_concurrency": (
        re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),),
    "engine_version": (
        re.compile(r"Initializing a V1 LLM engine \(v([^()\s]+)\) with config"),
        re.compile(r"vLLM API server (?:\(.*?\) )?version ([\w.+-]+)"),
        re.compile(r"█\s+version (\d[\w.+-]*)"),
    ),
    "cuda_visible_devices": (re.compile(r"CUDA_VISIBLE_DEVICES=([\w,-]*)"),),
}
_INIT_ENGINE = r"init engine \(profile, create kv cache, warmup model\) took "
_INIT_ENGINE_DONE = re.compile(_INIT_ENGINE)
_PHASE_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "initialize_model": (re.compile(r"Initializing model took ([\d.]+) seconds"),),
    "load_weights": (re.compile(r"Loading weights took ([\d.]+) seconds"),),
    "model_loading": (
        re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds"),),
    # vllm/compilation/monitor.py; decorators.py words it so when compile and the first
    # profiling run are timed together (no AOT compile).
    "torch_compile": (
        re.compile(r"torch\.compile (?:took|takes) ([\d.]+) s in total"),
        re.compile(r"torch\.compile and initial profiling/warmup run together took ([\d.]+) s"
                   r" in total"),
    ),
    # vllm/compilation/backends.py: compiled graphs found in the cache ("for compile range
    # [1, 8192]"; older: "for dynamic shape"). Part of the torch.compile figure.
    "compile_cache_load": (re.compile(
        r"Directly load the compiled graph\(s\) for .*? from the cache, took ([\d.]+) s"),),
    "graph_capture": (re.compile(r"Graph capturing finished in ([\d.]+) secs"),),
    "init_engine": (re.compile(_INIT_ENGINE + r"([\d.]+) (?:s\b|seconds)"),),
    "compilation": (re.compile(_INIT_ENGINE + r"[\d.]+ s \(compilation: ([\d.]+) s"),),
}
# vllm/v1/worker/cpu_model_runner.py (``warming_up_model``): the CPU build compiles in this
# warm-up (its compilation mode logs no compile time); whole-second timestamps only.
_TIMESTAMP = r"\d\d-\d\d (\d\d):(\d\d):(\d\d(?:\.\d+)?) \[[^\]]*\]\s+"
_SPANS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "compile_warmup": (re.compile(_TIMESTAMP + r"Warming up model for the compilation\.\.\."),
                       re.compile(_TIMESTAMP + r"Warming up done\.")),
}


def engine_initialized(text: str) -> bool:
    """Whether the engine core says its initialisation — profiling, the KV cache, and the
    compilation and graph capture that happen in them — is done (``init engine (profile,
    create kv cache, warmup model) took …``): from there it writes nothing more to its
    compile caches (vllm/v1/engine/core.py, ``_initialize_kv_caches``)."""
    return _INIT_ENGINE_DONE.search(text) is not None


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> str | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match is not None:
            return match.group(1)
    return None


def parse_startup_log(text: str) -> dict[str, Any]:
    """Facts the engine printed while starting (vLLM's own lines)."""
    facts: dict[str, Any] = {}
    for key, patterns in _FACT_PATTERNS.items():
        raw = _first(patterns, text)
        if raw is None:
            continue
        if key == "kv_cache_tokens":
            facts[key] = int(raw.replace(",", ""))
        elif key == "max_concurrency":
            facts[key] = float(raw)
        else:
            facts[key] = raw
    phases = {}
    for phase, patterns in _PHASE_PATTERNS.items():
        raw = _first(patterns, text)
        if raw is not None:
            phases[phase] = float(raw)
    for phase, (begin, end) in _SPANS.items():
        seconds = _span(begin, end, text)
        if seconds is not None:
            phases[phase] = seconds
    facts["startup_phases_s"] = phases
    return facts


def _span(begin: re.Pattern[str], end: re.Pattern[str], text: str) -> float | None:
    """Seconds between the first ``begin`` line and the first ``end`` line after it, from
    their log timestamps (None: either is missing)."""
    start = begin.search(text)
    if start is None:
        return None
    stop = end.search(text, start.end())
    if stop is None:
        return None
    h0, m0, s0 = start.groups()
    h1, m1, s1 = stop.groups()
    elapsed = (int(h1) - int(h0)) * 3600 + (int(m1) - int(m0)) * 60 + float(s1) - float(s0)
    return elapsed % 86_400  # a span across midnight


def boot_phases(phases: Mapping[str, float], boot_s: float | None
                ) -> dict[str, float | None]:
    """Where a boot's seconds went, as the trial's ``timings`` keys (None: not said).

    ``phases`` are the engine's raw start-up phases (:func:`parse_startup_log`, or the
    simulator's in the same keys); ``boot_s`` is the boot as measured, from the process
    start until ``/health`` answered.

    * ``boot_turn_wait_s``: the wait for another boot of the same configuration on the
      node (``turn_wait``, measured by the adapter, not logged by the engine);
    * ``boot_weights_s``: vLLM's "Model loading took" (it times building the model and
      loading its weights), else what it said of those two parts;
    * ``boot_compile_s``: the engine core's compilation total, else torch.compile's, else
      the CPU build's compile warm-up, else the time to load compiled graphs from cache;
    * ``boot_graph_capture_s``: CUDA graph capture;
    * ``boot_kv_cache_s``: "init engine (profile, create kv cache, warmup model)" less
      the compilation and graph capture it contains. In vLLM 0.32 that figure times
      ``EngineCore._initialize_kv_caches`` (vllm/v1/engine/core.py): the profile run —
      where torch.compile runs (the CPU build: its compile warm-up) — then KV-cache
      allocation, then ``compile_or_warm_up_model`` (more compile sizes and the graph
      capture, vllm/v1/worker/gpu_worker.py); weight loading comes before it;
    * ``boot_server_ready_s``: the rest of ``boot_s`` — interpreter start, imports,
      argument resolution, the API server — until ``/health`` answered (never negative;
      None without a measured boot).

    The log's figures are rounded (graph capture to whole seconds, the CPU warm-up to
    its whole-second timestamps): the compile phase is capped at the init-engine figure
    that contains it, and a derived phase is floored at zero and kept to milliseconds.
    """
    weights = phases.get("model_loading")
    if weights is None and ("initialize_model" in phases or "load_weights" in phases):
        weights = phases.get("initialize_model", 0.0) + phases.get("load_weights", 0.0)
    compile_s = next((phases[k] for k in ("compilation", "torch_compile", "compile_warmup",
                                          "compile_cache_load") if k in phases), None)
    graphs = phases.get("graph_capture")
    init_engine = phases.get("init_engine")
    kv_cache = None
    if init_engine is not None:
        if compile_s is not None:
            compile_s = min(compile_s, init_engine)
        kv_cache = round(max(0.0, init_engine - (compile_s or 0.0) - (graphs or 0.0)), 3)
    turn = phases.get("turn_wait")
    known = (turn, weights, compile_s, graphs, kv_cache)
    ready = None
    if boot_s is not None:
        ready = round(max(0.0, boot_s - sum(v for v in known if v is not None)), 3)
    return {"boot_turn_wait_s": turn, "boot_weights_s": weights, "boot_compile_s": compile_s,
            "boot_graph_capture_s": graphs, "boot_kv_cache_s": kv_cache,
            "boot_server_ready_s": ready}
