"""``slotune bench``: a drop-in for ``vllm bench serve`` that also judges the run against an SLO.

It takes ``vllm bench serve``'s options (their names, defaults and meaning, vLLM 0.32)
for an OpenAI-compatible text server, sends the same request bodies, prints vLLM's
summary block line for line, and with ``--save-result`` writes vLLM's result JSON under
vLLM's file name (:mod:`slotune.workers.loadgen.result` has the fields and their presence rules).
Below the summary it adds slotune's verdict: the SLO gate, the objective and the
diagnosis; its own fields sit under ``"slotune"`` in the JSON.

vLLM options this tool cannot honour (other backends, Hugging Face and multimodal
datasets, LoRA, profiling, plots, …) are refused with a sentence that says why; options
about vLLM's client-side tokenizer are accepted with a note, because token counts come
from the server's own ``/tokenize``. slotune's extras: ``--workload NAME|FILE`` (a base
the dataset and traffic options override), ``--dataset-name mooncake_trace`` (a
Mooncake trace; vLLM's ``timed_trace`` reads the same format and maps onto it with vLLM's
defaults), ``--prefix-repetition-zipf-s``, ``--slo`` (goodput targets in one string,
``p:95`` sets the percentile), ``--early-abort``, ``--time-scale``, ``--request-timeout``,
``--no-scrape``, ``--quiet``.

Exit codes: 0 done (whatever the gate says), 1 the server could not be reached or every
request failed, 2 a usage mistake (message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from slotune.workers.contracts import SLO, SLO_METRICS, Workload
from slotune.workers.loadgen.client import Endpoint, RequestOptions, RequestRecord
from slotune.workers.loadgen.diagnose.diagnosis import Diagnosis, diagnose
from slotune.workers.loadgen.generate.datasets import DatasetError
from slotune.workers.loadgen.generate.workload_files import (
    WorkloadError,
    builtin_workloads,
    load_workload,
)
from slotune.workers.loadgen.result import (
    OURS,
    QUEUE_METRICS,
    ResultInfo,
    build_result,
    percentile_key,
    reserved_key,
    write_result,
)
from slotune.workers.loadgen.runner import BenchmarkRun, ServerUnreachable, run_benchmark_sync
from slotune.workers.loadgen.score.scoring import score

__all__ = ["REFUSED", "build_parser", "main"]

PROG = "slotune bench"
BACKENDS = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}
"""vLLM's text-generation backends and the endpoint each streams from."""
DATASETS = ("random", "sharegpt", "custom", "prefix_repetition", "timed_trace", "sharegpt-like",
            "trace", "mooncake_trace", "multi_turn")
"""vLLM's text datasets slotune bench reads, then slotune's own four (vLLM's multi-turn
benchmark is a script of its own, with no ``--dataset-name``)."""
TRACE_DATASETS = ("trace", "timed_trace", "mooncake_trace")
"""The datasets whose lines carry their own arrival times (``--self-timed``)."""
TIMED_TRACE_DEFAULTS = {"block_size": 16, "timestamp_s": 1.0}
"""``vllm bench serve``'s defaults for timed_trace (``--timed-trace-chunk-hash-size 16``,
``--timed-trace-sec-multiplier 1``); ``mooncake_trace`` keeps Mooncake's (512, ms)."""
PERCENTILE_METRICS = (*SLO_METRICS, *QUEUE_METRICS)
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
            "repetition_penalty")
VLLM_BACKENDS_REFUSED = ("openai-responses", "openai-audio", "openai-embeddings",
                         "openai-embeddings-chat", "openai-embeddings-clip",
                         "openai-embeddings-vlm2vec", "infinity-embeddings",
                         "infinity-embeddings-clip", "vllm-pooling", "vllm-rerank")
VLLM_DATASETS_REFUSED = {
    "hf": "it downloads Hugging Face datasets, and these machines reach no hub",
    "burstgpt": "its CSV trace is not read here; convert it to --dataset-name trace JSONL",
    "random-mm": "it is multimodal; slotune bench sends text",
    "random-rerank": "it benchmarks rerankers, not streamed generation",
    "custom_image": "it is multimodal; slotune bench sends text",
    "custom_audio": "it is audio; slotune bench sends text",
    "spec_bench": "it downloads its questions; put them in a custom JSONL file",
    "speed_bench": "it downloads its questions; put them in a custom JSONL file",
    "sonnet": "vLLM 0.32 dropped it; cut text slices into a custom JSONL file instead",
}


@dataclass(frozen=True, slots=True)
class _Refused:
    flags: tuple[str, ...]
    why: str
    nargs: str | None = None  # None: a switch; "?", "1", "+", "*": takes values
    harmless: Any = None
    """A value that changes nothing (vLLM's default): given, it is not refused."""


REFUSED: tuple[_Refused, ...] = (
    _Refused(("--profile",), "it drives vLLM's torch profiler on the server; start the "
             "server with --profiler-config and profile outside the benchmark"),
    _Refused(("--plot-timeline",), "slotune bench draws no plots; the detailed JSON "
             "(--save-detailed) has every request's start time, TTFT and ITLs"),
    _Refused(("--plot-dataset-stats",), "slotune bench draws no plots; the detailed JSON "
             "(--save-detailed) has every request's input and output length"),
    _Refused(("--timeline-itl-thresholds",), "it colours --plot-timeline, which slotune "
             "bench does not draw", "1"),
    _Refused(("--lora-modules",), "LoRA adapters are not benchmarked by slotune bench; "
             "point --model at one adapter to measure it", "+"),
    _Refused(("--lora-assignment",), "LoRA adapters are not benchmarked by slotune bench",
             "1"),
    _Refused(("--use-beam-search",), "beam search is not a streamed sampling mode the "
             "OpenAI endpoints serve"),
    _Refused(("--probe-request-rate",), "side-channel probe requests are not sent by "
             "slotune bench; measure the probe load as its own run", "1", harmless="0"),
    _Refused(("--enable-multimodal-chat",), "slotune bench sends text only"),
    _Refused(("--custom-ensure-client-side-data",), "it concerns custom_image media; "
             "slotune bench sends text only"),
    _Refused(("--no-stream",), "it streams Hugging Face datasets, which slotune bench "
             "does not load"),
    _Refused(("--random-batch-size",), "it batches embedding requests; slotune bench "
             "streams generation", "1", harmless="1"),
    _Refused(("--no-reranker",), "it belongs to random-rerank, a reranker benchmark"),
    _Refused(("--hf-subset", "--hf-split", "--hf-name", "--hf-output-len"),
             "Hugging Face datasets are not loaded here (no hub on these machines)", "1"),
    _Refused(("--spec-bench-output-len", "--spec-bench-category", "--speed-bench-output-len",
              "--speed-bench-category", "--speed-bench-dataset-subset"),
             "spec_bench / speed_bench download their questions; use a custom JSONL", "1"),
    _Refused(("--blazedit-min-distance", "--blazedit-max-distance", "--asr-max-audio-len-sec",
              "--asr-min-audio-len-sec", "--bfcl-categories"),
             "it belongs to a Hugging Face dataset, which slotune bench does not load", "1"),
    _Refused(("--random-mm-base-items-per-request", "--random-mm-num-mm-items-range-ratio",
              "--random-mm-limit-mm-per-prompt", "--random-mm-bucket-config"),
             "random-mm is multimodal; slotune bench sends text only", "1"),
)
TOKENIZER_NOTES = {
    "tokenizer": "--tokenizer {value} is recorded as tokenizer_id; tokens are counted by the "
                 "server's own tokenizer (/tokenize and usage), the one that served them",
    "tokenizer_mode": "--tokenizer-mode has no effect: no client-side tokenizer is loaded "
                      "(the server's /tokenize counts)",
    "trust_remote_code": "--trust-remote-code has no effect: no model code runs in the client",
    "skip_tokenizer_init": "--skip-tokenizer-init has no effect: no client-side tokenizer "
                           "is loaded (the server's /tokenize counts)",
}


class UsageError(ValueError):
    """A mistake in the command line; reported on stderr with exit code 2."""


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'inf'") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (or 'inf'), got {text}")
    return value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Benchmark an OpenAI-compatible server with vllm bench serve's options "
        "and result JSON, and judge the run against an SLO.",
    )
    s = p.add_argument_group("server and backend")
    s.add_argument("--backend", default="openai",
                   help=f"{', '.join(BACKENDS)} (openai-chat streams /v1/chat/completions)")
    s.add_argument("--base-url", help="server URL, e.g. http://127.0.0.1:8000")
    s.add_argument("--host", default="127.0.0.1", help="used when --base-url is not given")
    s.add_argument("--port", type=int, default=8000, help="used when --base-url is not given")
    s.add_argument("--endpoint", help="API path (default /v1/completions, "
                   "/v1/chat/completions for openai-chat)")
    s.add_argument("--header", nargs="*", metavar="KEY=VALUE", help="extra request headers")
    s.add_argument("--insecure", action="store_true", help="skip TLS certificate checks")
    s.add_argument("--model", help="model name (default: the first of the server's /v1/models)")
    s.add_argument("--served-model-name", help="the name put in requests, if not --model")
    s.add_argument("--tokenizer", help="recorded as tokenizer_id (the server's tokenizer counts)")
    s.add_argument("--tokenizer-mode", help=argparse.SUPPRESS)
    s.add_argument("--trust-remote-code", action="store_true", default=None,
                   help=argparse.SUPPRESS)
    s.add_argument("--skip-tokenizer-init", action="store_true", default=None,
                   help=argparse.SUPPRESS)
    s.add_argument("--ready-check-timeout-sec", type=int, default=0,
                   help="wait up to this long for the first request to succeed (0: no check)")
    d = p.add_argument_group("dataset")
    d.add_argument("--workload", help=f"slotune: a built-in ({', '.join(builtin_workloads())})"
                   " or a workload YAML file, as the base the options below override")
    d.add_argument("--dataset-name", help=f"{', '.join(DATASETS)} (default random)")
    d.add_argument("--dataset-path", help="the ShareGPT JSON (sharegpt; multi_turn's real "
                   "conversations), custom JSONL or trace JSONL file")
    d.add_argument("--self-timed", action=argparse.BooleanOptionalAction, default=None,
                   help="send a trace's requests at its own timestamps (default for the "
                   "trace datasets); --no-self-timed: the --request-rate arrivals instead")
    d.add_argument("--num-prompts", type=int, help="requests to measure (default 1000)")
    d.add_argument("--seed", type=int, help="default 0")
    d.add_argument("--input-len", type=int, help="= --random-input-len")
    d.add_argument("--output-len", type=int, help="every dataset's output length")
    d.add_argument("--random-input-len", type=int, help="default 1024")
    d.add_argument("--random-output-len", type=int, help="default 128")
    d.add_argument("--random-range-ratio", help="default 0.0")
    d.add_argument("--random-prefix-len", type=int, help="default 0")
    d.add_argument("--sharegpt-output-len", type=int)
    d.add_argument("--custom-output-len", type=int, help="default 256; -1: the file's own")
    d.add_argument("--skip-chat-template", action="store_true")
    d.add_argument("--chat-template-kwargs", type=_json_object)
    d.add_argument("--disable-shuffle", action="store_true")
    d.add_argument("--no-oversample", action="store_true")
    d.add_argument("--prefix-repetition-num-prefixes", type=int)
    d.add_argument("--prefix-repetition-prefix-len", type=int)
    d.add_argument("--prefix-repetition-suffix-len", type=int)
    d.add_argument("--prefix-repetition-output-len", type=int)
    d.add_argument("--multi-turn-min-turns", type=int, help="slotune: default 2")
    d.add_argument("--multi-turn-max-turns", type=int, help="slotune: default 6")
    d.add_argument("--multi-turn-system-prompt-len", type=int,
                   help="slotune: tokens every session starts with (default 0)")
    d.add_argument("--multi-turn-input-len", type=int, help="slotune: tokens per user message "
                   "(default 128)")
    d.add_argument("--multi-turn-output-len", type=int, help="slotune: tokens per answer "
                   "(default 128)")
    d.add_argument("--multi-turn-think-time", type=float,
                   help="slotune: mean seconds between an answer and the next turn (default 1)")
    d.add_argument("--prefix-repetition-zipf-s", type=float, metavar="S",
                   help="slotune: choose prefix k with probability ∝ 1/k^S (Zipf popularity: a "
                   "few hot prefixes, a long tail) instead of uniformly")
    d.add_argument("--timed-trace-chunk-hash-size", type=int, metavar="TOKENS",
                   help="tokens per hash id (block size): default 16 for timed_trace "
                   "(vLLM's), 512 for mooncake_trace (Mooncake's)")
    d.add_argument("--timed-trace-sec-multiplier", type=float, metavar="X",
                   help="seconds per timestamp unit: default 1 for timed_trace (vLLM's), "
                   "0.001 (milliseconds) for mooncake_trace")
    d.add_argument("--timed-trace-label-timestamp", help="JSON key of the arrival time "
                   "(default timestamp)")
    d.add_argument("--timed-trace-label-input-length", help="JSON key of the prompt length "
                   "(default input_length)")
    d.add_argument("--timed-trace-label-output-length", help="JSON key of the output length "
                   "(default output_length)")
    d.add_argument("--timed-trace-label-hash-ids", help="JSON key of the block hash ids "
                   "(default hash_ids)")
    t = p.add_argument_group("traffic")
    t.add_argument("--request-rate", type=_rate, help="req/s or inf (default inf)")
    t.add_argument("--burstiness", type=float, help="gamma shape; 1 = Poisson (default)")
    t.add_argument("--max-concurrency", type=int)
    t.add_argument("--ramp-up-strategy", choices=["linear", "exponential"])
    t.add_argument("--ramp-up-start-rps", type=int)
    t.add_argument("--ramp-up-end-rps", type=int)
    t.add_argument("--num-warmups", type=int, help="warm-up requests, not counted")
    t.add_argument("--request-timeout", type=float, help="slotune: per-request deadline, s")
    t.add_argument("--time-scale", type=float, default=1.0,
                   help="slotune: the engine runs K× faster than real time (default 1)")
    g = p.add_argument_group("sampling")
    g.add_argument("--ignore-eos", action="store_true",
                   help="generate every requested token (always on for random)")
    for name in SAMPLING:
        g.add_argument(f"--{name.replace('_', '-')}", type=int if name == "top_k" else float)
    g.add_argument("--logprobs", type=int)
    g.add_argument("--extra-body", type=_json_object, help="JSON merged into every request")
    g.add_argument("--request-id-prefix", default=f"bench-{uuid.uuid4().hex[:8]}-")
    m = p.add_argument_group("measurement")
    m.add_argument("--percentile-metrics", default="ttft,tpot,itl",
                   help=f"of {', '.join(PERCENTILE_METRICS)} (default ttft,tpot,itl)")
    m.add_argument("--metric-percentiles", default="99")
    m.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="e.g. ttft:300 tpot:50")
    m.add_argument("--slo", help="slotune: targets in ms, e.g. ttft:300,tpot:50,p:95")
    m.add_argument("--slo-percentile", type=float, default=None, help="slotune: default 99")
    m.add_argument("--early-abort", action="store_true",
                   help="slotune: stop once the SLO gate can no longer hold (scores 0)")
    m.add_argument("--no-scrape", action="store_true", help="slotune: do not scrape /metrics")
    o = p.add_argument_group("result")
    o.add_argument("--save-result", action="store_true")
    o.add_argument("--save-detailed", action="store_true", help="add per-request arrays")
    o.add_argument("--append-result", action="store_true", help="add one line to the file")
    o.add_argument("--result-dir", help="default: the current directory")
    o.add_argument("--result-filename")
    o.add_argument("--label", help="the result's label and file name prefix (default backend)")
    o.add_argument("--metadata", nargs="*", metavar="KEY=VALUE",
                   help="top-level fields of the result JSON")
    o.add_argument("--disable-tqdm", action="store_true", help="no progress bar")
    o.add_argument("--quiet", action="store_true", help="slotune: = --disable-tqdm")
    for index, refused in enumerate(REFUSED):
        for flag in refused.flags:
            if refused.nargs is None:
                p.add_argument(flag, dest=f"_refused_{index}", action="append_const",
                               const=flag, help=argparse.SUPPRESS)
            else:
                p.add_argument(flag, dest=f"_refused_{index}", action="append",
                               nargs=None if refused.nargs == "1" else refused.nargs,
                               help=argparse.SUPPRESS)
    return p


def _refusals(args: argparse.Namespace, argv: Sequence[str]) -> None:
    for index, refused in enumerate(REFUSED):
        given = getattr(args, f"_refused_{index}")
        if not given:
            continue
        if refused.harmless is not None and all(v == refused.harmless for v in given):
            continue
        flag = next((a.split("=")[0] for a in argv if a.split("=")[0] in refused.flags),
                    refused.flags[0])
        raise UsageError(f"{flag} is not supported: {refused.why}")


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _range_ratio(text: str) -> float:
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        raise UsageError(f"--random-range-ratio {text!r}: expected a number in [0, 1)") from None
    if isinstance(value, dict):
        ratios = {value.get("input", 0.0), value.get("output", 0.0)}
        if len(ratios) != 1:
            raise UsageError("--random-range-ratio: separate input and output ratios are not "
                             "supported; give one number for both")
        value = ratios.pop()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"--random-range-ratio {text!r}: expected a number in [0, 1)")
    return float(value)


def _backend(args: argparse.Namespace) -> tuple[str, Endpoint, str]:
    """(backend, endpoint kind, path) — vLLM's backend, checked against the path."""
    backend = args.backend
    if backend in VLLM_BACKENDS_REFUSED:
        raise UsageError(f"--backend {backend} is not supported: slotune bench measures text "
                         f"generation streamed by {', '.join(BACKENDS)}")
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    endpoint: Endpoint = "chat" if backend == "openai-chat" else "completions"
    path = args.endpoint or ("/v1/chat/completions" if endpoint == "chat" else "/v1/completions")
    want = "chat/completions" if endpoint == "chat" else "completions"
    if not path.rstrip("/").endswith(want) or (endpoint == "completions"
                                                and path.rstrip("/").endswith("chat/completions")):
        raise UsageError(f"--endpoint {path!r} does not fit --backend {backend}: expected a "
                         f"path ending in /{want} (use --backend openai-chat for "
                         "/v1/chat/completions)")
    return backend, endpoint, path


def _dataset(args: argparse.Namespace, current: dict[str, Any]) -> dict[str, Any]:
    kind = args.dataset_name or current.get("kind", "random")
    if kind in VLLM_DATASETS_REFUSED:
        raise UsageError(f"--dataset-name {kind} is not supported: {VLLM_DATASETS_REFUSED[kind]}")
    if kind not in DATASETS:
        raise UsageError(f"--dataset-name {kind!r}: expected one of {', '.join(DATASETS)}")
    data = dict(current) if kind == current.get("kind") else {"kind": kind}
    if kind == "timed_trace":  # vLLM's name for the Mooncake format, with vLLM's defaults
        data = {"kind": "mooncake_trace", **TIMED_TRACE_DEFAULTS}
        if current.get("kind") == "mooncake_trace" and "path" in current:
            data["path"] = current["path"]
    out_len = args.output_len
    labels = {"timestamp": args.timed_trace_label_timestamp,
              "input_length": args.timed_trace_label_input_length,
              "output_length": args.timed_trace_label_output_length,
              "hash_ids": args.timed_trace_label_hash_ids}
    trace_flags = {"block_size": args.timed_trace_chunk_hash_size,
                   "timestamp_s": args.timed_trace_sec_multiplier,
                   "fields": ({**data.get("fields", {}), **{k: v for k, v in labels.items() if v}}
                              if any(labels.values()) else None)}
    flags: dict[str, dict[str, Any]] = {
        "random": {"input_len": args.input_len or args.random_input_len,
                   "output_len": out_len or args.random_output_len,
                   "range_ratio": None if args.random_range_ratio is None
                   else _range_ratio(args.random_range_ratio),
                   "prefix_len": args.random_prefix_len},
        "prefix_repetition": {
            "num_prefixes": args.prefix_repetition_num_prefixes,
            "prefix_len": args.prefix_repetition_prefix_len,
            "suffix_len": args.prefix_repetition_suffix_len,
            "output_len": out_len or args.prefix_repetition_output_len,
            "popularity": None if args.prefix_repetition_zipf_s is None else "zipf",
            "zipf_s": args.prefix_repetition_zipf_s,
        },
        "multi_turn": {
            "min_turns": args.multi_turn_min_turns,
            "max_turns": args.multi_turn_max_turns,
            "system_prompt_len": args.multi_turn_system_prompt_len,
            "input_len": args.multi_turn_input_len,
            "output_len": out_len or args.multi_turn_output_len,
            "think_time_s": args.multi_turn_think_time,
        },
        "timed_trace": trace_flags,
        "sharegpt": {"output_len": out_len or args.sharegpt_output_len},
        "custom": {"output_len": out_len or args.custom_output_len,
                   "skip_chat_template": args.skip_chat_template or None,
                   "chat_template_kwargs": args.chat_template_kwargs},
    }
    if kind in ("random", "prefix_repetition", "sharegpt-like") and args.dataset_path:
        raise UsageError(f"--dataset-path is not used by --dataset-name {kind}; name the "
                         "file's format: sharegpt, custom, trace, timed_trace or mooncake_trace")
    if kind in TRACE_DATASETS:
        if args.self_timed is not None:
            data["use_trace_arrivals"] = args.self_timed
    elif args.self_timed:
        raise UsageError(f"--self-timed: --dataset-name {kind} has no timestamps to keep; "
                         f"it applies to {', '.join(TRACE_DATASETS)}")
    if kind in ("sharegpt", "custom", *TRACE_DATASETS):
        if args.dataset_path:
            data["path"] = args.dataset_path
        elif "path" not in data:
            raise UsageError(f"--dataset-name {kind} needs --dataset-path FILE")
    if kind == "multi_turn" and args.dataset_path:  # real conversations, ShareGPT's format
        data["path"] = args.dataset_path
    if kind in ("sharegpt", "custom"):
        data["shuffle"] = not args.disable_shuffle
        data["oversample"] = not args.no_oversample
    for kind_name, fields in flags.items():
        given = {k: v for k, v in fields.items() if v is not None}
        if kind_name == kind or (kind_name == "timed_trace" and kind == "mooncake_trace"):
            data.update(given)
            continue
        # --output-len maps onto every dataset (vLLM's rule); the other flags belong to one
        own = sorted(k for k in given if not (k == "output_len" and out_len is not None))
        if own:
            raise UsageError(f"flags for the {kind_name} dataset ({', '.join(own)}) given, but "
                             f"the dataset is {kind!r} (use --dataset-name {kind_name})")
    return data


def _workload(args: argparse.Namespace) -> tuple[Workload, Path | None]:
    base_dir: Path | None = None
    if args.workload:
        workload, base_dir = load_workload(args.workload)
    else:
        workload = Workload(name="bench")
    data = workload.model_dump()
    data["dataset"] = _dataset(args, data["dataset"])
    arrivals = data["arrivals"]
    if args.ramp_up_strategy is not None:
        if args.request_rate is not None and math.isfinite(args.request_rate):
            raise UsageError("When using ramp-up, do not specify --request-rate: the ramp-up "
                             "controls the rate; leave it out or give inf (vllm bench "
                             "serve's rule)")
        if args.ramp_up_start_rps is None or args.ramp_up_end_rps is None:
            raise UsageError("When using --ramp-up-strategy, both --ramp-up-start-rps and "
                             "--ramp-up-end-rps must be specified")
        arrivals["request_rate"] = math.inf
        arrivals["ramp_up"] = {"strategy": args.ramp_up_strategy,
                               "start_rps": args.ramp_up_start_rps,
                               "end_rps": args.ramp_up_end_rps}
    elif args.ramp_up_start_rps is not None or args.ramp_up_end_rps is not None:
        raise UsageError("--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy "
                         "linear or exponential")
    for key, value in (("request_rate", args.request_rate), ("burstiness", args.burstiness),
                       ("max_concurrency", args.max_concurrency)):
        if value is not None:
            arrivals[key] = value
    if _rate_ignored(args, data["dataset"]):
        arrivals["request_rate"] = math.inf
    for key, value in (("num_prompts", args.num_prompts), ("warmup_requests", args.num_warmups),
                       ("seed", args.seed), ("request_timeout_s", args.request_timeout)):
        if value is not None:
            data[key] = value
    try:
        return Workload.model_validate(data), base_dir
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: "
            f"{err['msg'].removeprefix('Value error, ')}" for err in exc.errors()
        )
        raise UsageError(f"invalid workload after applying flags: {problems}") from None


def _rate_ignored(args: argparse.Namespace, dataset: dict[str, Any]) -> bool:
    """vLLM's timed_trace under --self-timed (its default) ignores --request-rate: the
    trace's own times are sent. (slotune's mooncake_trace rescales them to the rate.)"""
    return (args.dataset_name == "timed_trace" and dataset.get("use_trace_arrivals", True)
            and args.request_rate is not None and math.isfinite(args.request_rate))


def _slo(args: argparse.Namespace) -> SLO:
    items: list[str] = []
    if args.slo:
        items.append(args.slo)
    if args.goodput:
        items.extend(args.goodput)
    percentile = 99.0 if args.slo_percentile is None else args.slo_percentile
    try:
        return SLO.parse(items, percentile=percentile)
    except ValidationError as exc:
        msg = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"--slo/--goodput: {msg}") from None
    except ValueError as exc:
        raise UsageError(f"--slo/--goodput: {exc}") from None


def _list_arg(text: str, name: str, valid: Sequence[str] | None = None) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"{name}: empty list")
    if valid is not None:
        bad = [x for x in items if x not in valid]
        if bad:
            raise UsageError(f"{name}: unknown {', '.join(bad)}; valid: {', '.join(valid)}")
    return items


def _percentiles(text: str) -> list[float]:
    out = []
    for item in _list_arg(text, "--metric-percentiles"):
        try:
            value = float(item)
        except ValueError:
            raise UsageError(f"--metric-percentiles: {item!r} is not a number") from None
        if not 0 < value <= 100:
            raise UsageError(f"--metric-percentiles: {item} is not in (0, 100]")
        out.append(value)
    return out


def _options(args: argparse.Namespace, workload: Workload, err: Console) -> RequestOptions:
    sampling = {k: getattr(args, k) for k in SAMPLING if getattr(args, k) is not None}
    if "temperature" not in sampling and "temperature" not in (args.extra_body or {}):
        err.print("note: no --temperature: the server samples at its own default, as "
                  "vllm bench serve does (add --temperature 0 for greedy requests)")
    headers = {}
    if os.environ.get("OPENAI_API_KEY"):  # vLLM's client sends it; never printed or stored
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    headers.update(_pairs(args.header, "--header"))
    # vLLM ignores EOS for its random dataset; slotune's synthetic sets are fixed-length too
    fixed_length = workload.dataset.kind in ("random", "sharegpt-like", "trace",
                                             "mooncake_trace")
    return RequestOptions(sampling=sampling, ignore_eos=args.ignore_eos or fixed_length,
                          extra_body=args.extra_body or {}, logprobs=args.logprobs,
                          headers=headers, request_id_prefix=args.request_id_prefix,
                          keep_text=args.save_detailed)


def _metadata(args: argparse.Namespace) -> dict[str, str]:
    metadata = _pairs(args.metadata, "--metadata")
    clash = sorted(k for k in metadata if reserved_key(k))
    if clash:
        raise UsageError(f"--metadata {', '.join(clash)}: the result already has a field of "
                         "that name (vLLM would overwrite it silently); choose another key")
    return metadata


def _result_path(args: argparse.Namespace, workload: Workload, info: ResultInfo,
                 date: str) -> Path:
    if args.result_filename:
        name = str(args.result_filename)
    else:
        arrivals = workload.arrivals
        conc = f"-concurrency{arrivals.max_concurrency}" if arrivals.max_concurrency else ""
        model = str(info.model_id).split("/")[-1]
        label = info.label or info.backend
        ramp = arrivals.ramp_up
        if ramp is not None:
            rate = f"ramp-up-{ramp.strategy}-{ramp.start_rps}qps-{ramp.end_rps}qps"
        else:
            rate = f"{float(arrivals.request_rate)}qps"  # vLLM's spelling: 4.0qps, infqps
        name = f"{label}-{rate}{conc}-{model}-{date}.json"
    return Path(args.result_dir or ".") / name


def _line(label: str, value: Any, fmt: str = "") -> str:
    return f"{label:<40} {value:<10{fmt}}"


def _summary(doc: dict[str, Any], metrics: list[str], pcts: list[float]) -> list[str]:
    """vLLM's summary block, line for line, from the result document."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             _line("Successful requests:", doc["completed"]),
             _line("Failed requests:", doc["failed"])]
    if doc["max_concurrency"] is not None:
        lines.append(_line("Maximum request concurrency:", doc["max_concurrency"]))
    if doc["request_rate"] != "inf":
        lines.append(_line("Request rate configured (RPS):", doc["request_rate"], ".2f"))
    lines += [_line("Benchmark duration (s):", doc["duration"], ".2f"),
              _line("Total input tokens:", doc["total_input_tokens"]),
              _line("Total generated tokens:", doc["total_output_tokens"]),
              _line("Request throughput (req/s):", doc["request_throughput"], ".2f")]
    if doc["request_goodput"] is not None:
        lines.append(_line("Request goodput (req/s):", doc["request_goodput"], ".2f"))
    lines += [_line("Output token throughput (tok/s):", doc["output_throughput"], ".2f"),
              _line("Peak output token throughput (tok/s):", doc["max_output_tokens_per_s"],
                    ".2f"),
              _line("Peak concurrent requests:", float(doc["max_concurrent_requests"]), ".2f"),
              _line("Total token throughput (tok/s):", doc["total_token_throughput"], ".2f")]
    sections = (("ttft", "TTFT", "Time to First Token"),
                ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                ("itl", "ITL", "Inter-token Latency"),
                ("e2el", "E2EL", "End-to-end Latency"),
                ("client_queue_time", "Client Queue Time", "Client-side Queueing"),
                ("e2el_including_client_queue", "E2EL incl. Client Queue",
                 "Queue-inclusive End-to-end Latency"))
    for key, name, header in sections:
        if key not in metrics or f"mean_{key}_ms" not in doc:
            continue
        lines += ["{s:{c}^{n}}".format(s=header, n=50, c="-"),
                  _line(f"Mean {name} (ms):", doc[f"mean_{key}_ms"], ".2f"),
                  _line(f"Median {name} (ms):", doc[f"median_{key}_ms"], ".2f")]
        for p in pcts:
            word = percentile_key(p)
            lines.append(_line(f"P{word} {name} (ms):", doc[f"p{word}_{key}_ms"], ".2f"))
    lines.append("=" * 50)
    return lines


def _verdict(run: BenchmarkRun, doc: dict[str, Any], slo: SLO,
             diagnosis: Diagnosis | None) -> list[str]:
    """slotune's lines below vLLM's block: the gate, the objective, the diagnosis."""
    ours = doc[OURS]
    lines = [f"SLO gate ({slo}): {'PASS' if ours['gate'] else 'FAIL'} — {ours['gate_reason']}",
             f"Objective: {ours['objective']:.3f} req/s",
             f"Send lag p99 (ms): {run.send_lag.p99_ms:.2f}"]
    if diagnosis is not None:
        lines.append(f"Diagnosis: {diagnosis.label} — {diagnosis.reason}")
        lines += [f"  knob: {knob}" for knob in diagnosis.knobs]
    elif not run.scrape.available:
        lines.append(f"Diagnosis: none ({run.scrape.error or 'no /metrics'})")
    lines += _session_lines(ours.get("sessions"))
    lines += [f"warning: {w}" for w in run.warnings]
    return lines


def _session_lines(sessions: dict[str, Any] | None) -> list[str]:
    """A conversation workload's own block: TTFT by turn, the sessions, the cache hits."""
    if not sessions:
        return []

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [f"Sessions: {sessions['completed_sessions']} of {sessions['sessions']} completed, "
             f"mean {ms(sessions['mean_session_latency_s'])} s each",
             "  turn  requests  mean prompt  mean TTFT (ms)  p99 TTFT (ms)"]
    for row in sessions["per_turn"]:
        prompt = "-" if row["mean_prompt_tokens"] is None else f"{row['mean_prompt_tokens']:.0f}"
        lines.append(f"  {row['turn']:>4}  {row['requests']:>8}  {prompt:>11}  "
                     f"{ms(row['mean_ttft_ms']):>14}  {ms(row['p99_ttft_ms']):>13}")
    rate = sessions["in_session_hit_rate"]
    if rate is not None:
        lines.append(f"Prefix cache: {sessions['in_session_hit_tokens']:.0f} of "
                     f"{sessions['context_tokens']:.0f} re-sent context tokens hit in session "
                     f"({rate:.0%}); {sessions['other_hit_tokens']:.0f} other hit tokens")
    return lines


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    _refusals(args, argv)
    if not (args.time_scale > 0 and math.isfinite(args.time_scale)):
        raise UsageError(f"--time-scale must be a positive number, got {args.time_scale}")
    if args.ready_check_timeout_sec < 0:
        raise UsageError("--ready-check-timeout-sec must be >= 0")
    backend, endpoint, path = _backend(args)
    workload, base_dir = _workload(args)
    slo = _slo(args)
    metrics = _list_arg(args.percentile_metrics, "--percentile-metrics", PERCENTILE_METRICS)
    pcts = list(dict.fromkeys(_percentiles(args.metric_percentiles)))  # vLLM prints in order
    metadata = _metadata(args)
    base_url = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    if not base_url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url {base_url!r}: expected http://HOST:PORT")
    err = Console(stderr=True)
    for key, note in TOKENIZER_NOTES.items():
        if getattr(args, key) is not None:
            err.print(f"note: {note.format(value=getattr(args, key))}", markup=False)
    if _rate_ignored(args, workload.dataset.model_dump()):
        err.print(f"note: --request-rate {args.request_rate:g} is ignored under --self-timed, "
                  "as vllm bench serve ignores it: the trace's own times are sent (use "
                  "--dataset-name mooncake_trace to rescale the trace to a rate, or "
                  "--no-self-timed for that rate's arrivals)")
    if args.result_filename and not (args.save_result or args.append_result):
        err.print("note: --result-filename without --save-result or --append-result: no file "
                  "is written (vllm bench serve's rule)")
    options = _options(args, workload, err)
    verify = not args.insecure
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
        console=err, disable=args.quiet or args.disable_tqdm, transient=False,
    )
    task = progress.add_task(f"{workload.name} → {base_url}{path}", total=workload.num_prompts,
                             failed=0)
    failures = 0

    def tick(done: int, total: int, record: RequestRecord) -> None:
        nonlocal failures
        failures += 0 if record.success else 1
        progress.update(task, completed=done, total=total, failed=failures)

    with progress:
        run = run_benchmark_sync(  # no model named: the server's first, as vLLM does
            base_url, args.served_model_name or args.model, workload, slo, endpoint=endpoint,
            path=path,
            time_scale=args.time_scale, early_abort=args.early_abort,
            scrape_metrics=not args.no_scrape, base_dir=base_dir, progress=tick,
            options=options, ready_timeout_s=float(args.ready_check_timeout_sec),
            verify_tls=verify,
        )
    model_id = args.model or run.listed_model or run.model
    info = ResultInfo(backend=backend, label=args.label, model_id=model_id,
                      tokenizer_id=args.tokenizer or model_id, metadata=metadata,
                      percentile_metrics=metrics, percentiles=pcts,
                      detailed=args.save_detailed, goodput=bool(slo.targets))
    aborted = run.early_abort.reason if run.early_abort else None
    sc = score(run.records, run.duration_s, slo, pcts, aborted=aborted)
    diagnosis = diagnose(run.scrape, sc, slo)
    doc = build_result(run=run, score=sc, workload=workload, slo=slo, model=run.model,
                       endpoint=endpoint, base_url=base_url, diagnosis=diagnosis, info=info)
    print("\n".join(_summary(doc, metrics, pcts)))
    print("\n".join(_verdict(run, doc, slo, diagnosis)))
    if args.save_result or args.append_result:
        result_path = _result_path(args, workload, info, doc["date"])
        write_result(doc, result_path, append=args.append_result)
        print(f"Result written to {result_path}")
    if sc.completed == 0 and run.early_abort is None:
        first = next((r.error for r in run.records if r.error), "no request was sent")
        err.print(f"{PROG}: every request failed; first error: {first}", markup=False)
        return 1
    return 0


def main(argv: list[str]) -> int:
    """Entry point of ``slotune bench``; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage + the error (or --help)
        return int(exc.code) if isinstance(exc.code, int) else 2
    try:
        return _run(args, argv)
    except (UsageError, WorkloadError, DatasetError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except ServerUnreachable as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the result directory is not writable
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
