"""The vLLM adapter: ``vllm serve MODEL --flag=value …`` on the GPUs Ray assigned, or the CPU.

The executable is the space's ``engine_binary``, else the worker's ``SLOTUNE_VLLM_BIN``,
else ``vllm`` on PATH — read on the worker, where the engine runs. The model is a Hugging
Face name or a local directory. The engine inherits what vLLM reads from the environment
(``VLLM_*``, ``HF_*``, compiler caches; secrets among them are redacted in every log).
On the CPU device (``gpu: cpu``, vLLM's CPU build) it gets no GPUs and the CPU platform
is selected explicitly.

**Caches.** vLLM's caches live in the node's shared folder
(:mod:`slotune.workers.engines.shared_cache`, ``<dir>/vllm/``), so a configuration compiled once
on a node boots faster there again: ``vllm/`` is ``VLLM_CACHE_ROOT`` (vLLM 0.32 keeps
``torch_compile_cache/`` — its compiled graphs under a hash of the configuration, the
environment and its code, in ``torch_aot_compile/<hash>/`` with PyTorch ≥ 2.10 —,
``modelinfos/``, ``deep_gemm/``, ``flashinfer_autotune_cache/`` and ``startup_plan/``
there), ``torchinductor/`` is ``TORCHINDUCTOR_CACHE_DIR`` and ``triton/`` is
``TRITON_CACHE_DIR`` (vLLM points Inductor into its hash directory while it compiles the
model; these catch the rest), and ``VLLM_XLA_CACHE_PATH``, whose default is *beside*
``VLLM_CACHE_ROOT``, goes under it. An operator's own value of any of them wins. With
``SLOTUNE_ENGINE_CACHE_DIR=off`` they are the trial's own directory, as when the shared
folder cannot be used.

**Taking turns.** Two boots of one configuration take turns (:meth:`VllmEngine.boot_slot`),
keyed by :meth:`VllmEngine.compile_key`: vLLM writes the index of its non-AOT cache
(``vllm_compile_cache.py``) in place, so a boot that reads it while another writes it can
fail, and two boots compiling the same entries at once both pay for the compile. An
``--enforce-eager`` boot compiles nothing and takes no turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import platform
import shlex
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from slotune.workers.contracts.options import EngineOptions
from slotune.workers.engines._log_patterns import engine_initialized
from slotune.workers.engines.base import EngineAdapter, flag_args
from slotune.workers.engines.shared_cache import (
    LOCK_POLL_S,
    BootLock,
    BootLockUnusable,
    SharedCacheUnusable,
    boot_key,
    engine_cache_dir,
)
from slotune.workers.trust import trust_of

if TYPE_CHECKING:
    from slotune.workers.gpu import GPUProbe

log = logging.getLogger(__name__)

VLLM_BIN_ENV = "SLOTUNE_VLLM_BIN"

VLLM_ARGS = frozenset({
    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "max_model_len",
    "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_dtype", "quantization",
    "speculative_config", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "enable_expert_parallel", "block_size",
    "enforce_eager", "load_format", "served_model_name", "dtype", "seed",
    "cpu_offload_gb", "max_logprobs", "disable_log_stats", "trust_remote_code",
    "long_prefill_token_threshold", "async_scheduling",
    "compilation_config", "scheduling_policy",
})
"""The ``vllm serve`` arguments a search space may set without declaring them.

Each is in ``vllm serve --help=all`` of vLLM 0.32.0; ``swap_space``,
``max_seq_len_to_capture`` and ``max_num_partial_prefills`` are gone from vLLM and so
from here (a space that still sets one must declare it, and vLLM will refuse it)."""

COMPILE_NEUTRAL_ARGS = frozenset({
    "gpu_memory_utilization", "kv_cache_memory_bytes", "enable_prefix_caching",
    "enable_chunked_prefill", "long_prefill_token_threshold", "scheduling_policy", "seed",
    "served_model_name", "load_format", "disable_log_stats",
})
"""Arguments that leave vLLM 0.32's compile-cache hash alone: its ``VllmConfig.compute_hash``
(the hash of ``torch_compile_cache/<hash>``), built by vLLM itself from the tiny model's
configuration with each argument changed, did not move for these; it moved for
``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``, ``kv_cache_dtype``,
``block_size``, ``dtype``, ``max_logprobs``, ``async_scheduling``, ``cpu_offload_gb``,
``trust_remote_code``, ``speculative_config`` and ``compilation_config`` (parallel sizes
and quantization are in the hashed parallel and model configs). They stay out of
:meth:`VllmEngine.compile_key`, so configurations that differ only in them, and so share
their compiled entries, take turns."""

_OWN_CACHES = {"VLLM_CACHE_ROOT": "vllm-cache", "TORCHINDUCTOR_CACHE_DIR": "inductor-cache",
               "TRITON_CACHE_DIR": "triton-cache"}
"""The caches in the trial's own directory (``off``, or no usable shared folder)."""
_SHARED_CACHES = {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
                  "TRITON_CACHE_DIR": "triton"}
"""The same caches in the node's shared folder for vLLM (no version in the names: vLLM,
Inductor and Triton put their own versions in their keys)."""


class VllmOptions(EngineOptions):
    """Options of the vLLM engine (a spec's ``options`` when its engine is ``vllm``).

    Spaces and stored specs write ``engine_binary`` at the top level (its place before
    the options were the engine's own); ``vllm: {engine_binary: …}`` reads the same.
    """

    title: ClassVar[str] = "vLLM"
    flat_fields: ClassVar[tuple[str, ...]] = ("engine_binary",)

    engine_binary: str | None = Field(None, min_length=1)
    """The ``vllm`` executable, as the workers see it; None: the worker's
    ``SLOTUNE_VLLM_BIN``, else ``vllm`` on PATH. A name the operator registered
    (``SLOTUNE_ENGINE_BINARIES``) is stored as its path; over the API only such a name is
    taken (:mod:`slotune.workers.trust`)."""

    @field_validator("engine_binary")
    @classmethod
    def _registered_or_the_operators(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else trust_of(info).executable(value, "engine_binary")


class VllmEngine(EngineAdapter):
    """Real vLLM (any build: CUDA, ROCm, CPU)."""

    kind = "vllm"
    options_model = VllmOptions
    known_args: ClassVar[frozenset[str]] = VLLM_ARGS
    health_poll_s = 1.0
    occupies_gpus = True
    env_prefixes: ClassVar[tuple[str, ...]] = (
        "VLLM_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TORCHINDUCTOR_", "TRITON_",
        "NCCL_", "OMP_", "KMP_", "LD_PRELOAD", "XDG_CACHE_HOME",
    )

    @property
    def binary(self) -> str:
        return (self.spec.options_of(VllmOptions).engine_binary
                or os.environ.get(VLLM_BIN_ENV) or "vllm")

    def binary_hint(self) -> str:
        return (f"set {VLLM_BIN_ENV} (or the space's engine_binary) to the path of the "
                "`vllm` executable")

    def hardware_facts(self, probe: GPUProbe) -> dict[str, Any]:
        if self.spec.device == "cpu":
            return {"gpu_name": f"cpu ({_cpu_model()})"}
        gpus = probe.gpus(self.gpu_ids)
        if not gpus:
            return {}
        return {"gpu_name": gpus[0].name, "gpu_memory_bytes": gpus[0].memory_total,
                "gpu_driver": probe.driver_version()}

    def command(self, port: int) -> list[str]:
        return [*serve_argv(self.spec.model, self.spec.engine_flags, self.binary),
                "--host", self.host, "--port", str(port)]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        shared = None if self._own_caches else self.shared_cache
        base, names = (self.workdir, _OWN_CACHES) if shared is None else (shared, _SHARED_CACHES)
        for name, folder in names.items():
            env.setdefault(name, str(base / folder))  # the operator's own value wins
        env.setdefault("VLLM_XLA_CACHE_PATH", str(Path(env["VLLM_CACHE_ROOT"]) / "xla_cache"))
        if self.spec.device == "cpu":
            env["VLLM_TARGET_DEVICE"] = "cpu"
            env.pop("CUDA_VISIBLE_DEVICES", None)
        return env

    # ---- shared caches ----------------------------------------------------------------

    _own_caches = False
    """Set when this boot must not use the shared folder (it fell back)."""

    @functools.cached_property
    def shared_cache(self) -> Path | None:
        """vLLM's folder of the node's shared caches; None when they are ``off`` or the
        folder cannot be used (then this trial keeps its own, and its log says why)."""
        try:
            return engine_cache_dir(self.kind)
        except SharedCacheUnusable as exc:
            self._use_own_caches(f"{exc}; this trial keeps its caches in its own directory")
            return None

    def compile_key(self) -> str:
        """What vLLM's compiled entries for this boot depend on, as far as the spec says:
        the model, the device and every argument but :data:`COMPILE_NEUTRAL_ARGS`.

        An argument nobody has checked counts, so two boots can at worst key apart while
        vLLM hashes them alike: they then compile side by side, which vLLM 0.32's atomic
        artifact writes (temporary file, then rename) survive; only the wait is lost.
        """
        flags = {k: v for k, v in self.spec.engine_flags.items()
                 if k not in COMPILE_NEUTRAL_ARGS}
        return boot_key({"model": self.spec.model, "device": self.spec.device, "flags": flags})

    @contextlib.asynccontextmanager
    async def boot_slot(self, timeout_s: float) -> AsyncIterator[None]:
        """Boots of one :meth:`compile_key` on one node take turns, each holding the lock
        until its engine core has initialised (its compiled entries are written: the next
        boot finds them) or the engine is healthy or has failed; a wait longer than
        ``timeout_s`` gives up the turn and boots with the trial's own caches instead."""
        folder = self.shared_cache
        if folder is None or self._own_caches or self.spec.engine_flags.get("enforce_eager"):
            yield
            return
        lock = BootLock(folder / "locks" / f"{self.compile_key()}.lock")
        began = time.monotonic()
        try:
            held = await lock.acquire(timeout_s, owner=f"trial {self.spec.run_id}",
                                      on_wait=self.notes.append)
        except BootLockUnusable as exc:
            self._use_own_caches(f"{exc}; this trial keeps its caches in its own directory")
            yield
            return
        waited = self.turn_wait_s = time.monotonic() - began
        if not held:
            self._use_own_caches(
                f"the compile-cache lock {lock.path} was still held after {timeout_s:g} s "
                f"(by {lock.holder() or 'another boot'}); compiling in this trial's own "
                "directory instead of waiting on")
            yield
            return
        if waited >= LOCK_POLL_S:
            self.notes.append(f"waited {waited:.1f} s for its turn to boot (compile caches "
                              f"in {folder})")
        handover = asyncio.create_task(self._release_once_initialised(lock))
        try:
            yield
        finally:
            handover.cancel()
            lock.release()

    async def _release_once_initialised(self, lock: BootLock) -> None:
        # The API server's own start-up, after the engine core, reads and writes no
        # compile cache: the next boot of this configuration need not wait for it.
        while lock.held:
            if engine_initialized(self.log_text()):
                lock.release()
                return
            await asyncio.sleep(LOCK_POLL_S)

    def _use_own_caches(self, why: str) -> None:
        self._own_caches = True
        self.notes.append(f"compile caches: {why}")
        log.warning("trial %s: %s", self.spec.run_id, why)


def serve_argv(model: str, flags: Mapping[str, Any], binary: str = "vllm") -> list[str]:
    """``vllm serve MODEL --flag=value …``: the one spelling of a configuration as vLLM's
    command line (the engine adapter runs it; reports, the API and the CLI show it)."""
    return [binary, "serve", model, *flag_args({k: v for k, v in flags.items() if k != "model"})]


def vllm_command(model: str, flags: Mapping[str, Any]) -> str:
    """The shell-quoted ``vllm serve`` line that reproduces a configuration."""
    return shlex.join(serve_argv(model, flags))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
