"""GPU probing through NVML (``nvidia-ml-py``): names, memory, and who holds each GPU.

The worker checks its GPUs are free before it boots an engine and free again after
teardown, so a leaked engine is caught where it happened. Without NVML (no driver, no
GPU: every machine in CI) the probe says so once and carries on; simulated runs report
the simulated GPU from the catalogue instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

BUSY_MEMORY_BYTES = 1 << 30
"""A GPU with more than this in use (and no process we can see) counts as busy."""


@dataclass(frozen=True, slots=True)
class GPUInfo:
    index: int
    name: str
    memory_total: int
    memory_free: int
    process_ids: tuple[int, ...]

    @property
    def memory_used(self) -> int:
        return self.memory_total - self.memory_free


class GPUProbe:
    """NVML when it is there; a clear "unavailable" (and no checks) when it is not."""

    def __init__(self) -> None:
        self.available = False
        self.reason = ""
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.available = True
        except Exception as exc:  # any NVML failure means "no probe here"
            self.reason = f"NVML unavailable ({type(exc).__name__}: {exc})"
            log.info("%s: GPU checks are skipped", self.reason)

    def gpus(self, indices: Sequence[str] = ()) -> list[GPUInfo]:
        """The GPUs with these indices (all when empty); [] without NVML."""
        if not self.available:
            return []
        nvml = self._nvml
        count = int(nvml.nvmlDeviceGetCount())
        wanted = [int(i) for i in indices] if indices else list(range(count))
        out = []
        for index in wanted:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            name = nvml.nvmlDeviceGetName(handle)
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except nvml.NVMLError:
                procs = []
            out.append(GPUInfo(index, name.decode() if isinstance(name, bytes) else str(name),
                               int(memory.total), int(memory.free),
                               tuple(int(p.pid) for p in procs)))
        return out

    def driver_version(self) -> str | None:
        """The driver's version string; None without NVML."""
        if not self.available:
            return None
        try:
            version = self._nvml.nvmlSystemGetDriverVersion()
        except self._nvml.NVMLError:
            return None
        return version.decode() if isinstance(version, bytes) else str(version)

    def busy(self, indices: Sequence[str] = ()) -> list[str]:
        """Why each of these GPUs is not free (empty: all free, or no NVML to tell)."""
        problems = []
        for gpu in self.gpus(indices):
            if gpu.process_ids:
                problems.append(f"GPU {gpu.index} ({gpu.name}) is held by process(es) "
                                f"{', '.join(map(str, gpu.process_ids))}")
            elif gpu.memory_used > BUSY_MEMORY_BYTES:
                problems.append(f"GPU {gpu.index} ({gpu.name}) has "
                                f"{gpu.memory_used / (1 << 30):.1f} GiB in use")
        return problems
