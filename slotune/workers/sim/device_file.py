"""A GPU outside the catalogue, described by its datasheet numbers in a small file.

Wherever the simulator takes a GPU name (``--sim-gpu``, a space's or a trial's ``gpu``,
:func:`slotune.workers.sim.catalog.get_gpu`) it also takes the path of such a file, ending in
``.yaml``, ``.yml`` or ``.json``::

    # b200.yaml
    name: b200                       # short name: reports, calibration lookup
    device_name: NVIDIA B200         # optional (default: name); vLLM's defaults read it
    memory_gib: 180                  # or memory_bytes: 193273528320
    bf16_tflops: 2250                # dense BF16 tensor TFLOP/s (no sparsity)
    fp8_tflops: 4500                 # optional; leave out where there are no FP8 tensor cores
    memory_bandwidth_gbps: 8000      # GB/s (gigabytes, not gigabits)
    interconnect_gbps: 900           # GPU-to-GPU GB/s per direction (NVLink, else PCIe)
    interconnect_latency_us: 6       # optional: one all-reduce's fixed latency

Paths: absolute, or ``~/…``; a relative path is taken from the working directory, so a
caller with a better base resolves it first (a search space resolves ``gpu: ./b200.yaml``
against the space file's directory and stores it absolute; the trial specs then carry
that path, so the file must be readable where the trials run, as a model directory must).

Every number is checked when the file is read, and a wrong one is refused with
:class:`DeviceFileError` naming the file and the field; unknown keys are refused too (a
misspelt optional field would otherwise be silently ignored). Each number must also lie in
a range that holds every GPU and then some (:data:`DATASHEET_RANGES`: up to 16 TiB of
memory, 100 PFLOP/s, 100 TB/s): a number outside it is a wrong unit or a typo, and
``memory_gib: 1e8`` once became hundreds of millions of KV blocks and a bare MemoryError.
The step-time model's fitted efficiencies are looked up by ``name``
(:func:`slotune.workers.sim.calibration.load_calibration`): a GPU without its own entry takes
the ``default`` one.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

from slotune.workers.safe_yaml import YamlInputError, load_yaml_file, unique_keys
from slotune.workers.sim._specs import GiB, GPUSpec, UnknownCatalogEntry

__all__ = ["DATASHEET_RANGES", "DEVICE_FILE_SUFFIXES", "DeviceFileError", "is_device_file",
           "load_device_file"]

DEVICE_FILE_SUFFIXES = (".yaml", ".yml", ".json")

NVLINK_LATENCY_US = 6.0
PCIE_LATENCY_US = 20.0
"""Default all-reduce latencies, the catalogue's own: NVLink-class links (≥ 100 GB/s)
and PCIe."""

_REQUIRED = ("name", "bf16_tflops", "memory_bandwidth_gbps", "interconnect_gbps")
_OPTIONAL = ("device_name", "memory_gib", "memory_bytes", "fp8_tflops",
             "interconnect_latency_us")
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")

DATASHEET_RANGES: dict[str, tuple[float, float, str]] = {
    "memory_gib": (0.5, 16384, "GiB"),
    "memory_bytes": (0.5 * GiB, 16384 * GiB, "bytes"),
    "bf16_tflops": (0.1, 100_000, "dense TFLOP/s"),
    "fp8_tflops": (0.1, 200_000, "dense TFLOP/s"),
    "memory_bandwidth_gbps": (1, 100_000, "GB/s"),
    "interconnect_gbps": (0.1, 100_000, "GB/s per direction"),
    "interconnect_latency_us": (0.01, 100_000, "microseconds"),
}
"""Each number's bounds (low, high, unit): wide around every GPU made (the largest today
has under 300 GiB, a few PFLOP/s and 8 TB/s), narrow enough to catch a wrong unit."""


class DeviceFileError(UnknownCatalogEntry):
    """A device file the simulator refuses; the message names the file and the field."""


def is_device_file(name: str) -> bool:
    """Whether a GPU name is the path of a device file (by its ending)."""
    return name.strip().lower().endswith(DEVICE_FILE_SUFFIXES)


def load_device_file(path: str | Path) -> GPUSpec:
    """The :class:`GPUSpec` a device file describes (read once per process and path)."""
    return _load(str(Path(path).expanduser().resolve()))


@cache
def _load(path: str) -> GPUSpec:
    file = Path(path)
    where = f"device file {file}"
    if not file.is_file():
        raise DeviceFileError(f"{where} does not exist; write the GPU's datasheet numbers "
                              "there (see slotune/workers/sim/device_file.py)")
    data = _read(file, where)
    if not isinstance(data, dict):
        raise DeviceFileError(f"{where}: a device file is a mapping of datasheet fields, "
                              f"got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in (*_REQUIRED, *_OPTIONAL))
    if unknown:
        raise DeviceFileError(f"{where}: unknown field {', '.join(map(repr, unknown))}; valid: "
                              f"{', '.join((*_REQUIRED, *_OPTIONAL))}")
    missing = [k for k in _REQUIRED if data.get(k) is None]
    if missing:
        raise DeviceFileError(f"{where} lacks {', '.join(map(repr, missing))}, which the "
                              "simulator needs")
    name = data["name"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DeviceFileError(f"{where}: name must be a short name of lower-case letters, "
                              f"digits and '-' (e.g. b200), got {name!r}")
    device_name = data.get("device_name", name)
    if not isinstance(device_name, str) or not device_name.strip():
        raise DeviceFileError(f"{where}: device_name must be text, got {device_name!r}")
    memory_bytes = _memory(data, where)
    interconnect = _number(data, "interconnect_gbps", where) * 1e9
    latency_us = (_number(data, "interconnect_latency_us", where)
                  if data.get("interconnect_latency_us") is not None
                  else NVLINK_LATENCY_US if interconnect >= 100e9 else PCIE_LATENCY_US)
    return GPUSpec(
        name=name,
        device_name=device_name.strip(),
        memory_bytes=memory_bytes,
        bf16_flops=_number(data, "bf16_tflops", where) * 1e12,
        fp8_flops=(_number(data, "fp8_tflops", where) * 1e12
                   if data.get("fp8_tflops") is not None else None),
        memory_bandwidth=_number(data, "memory_bandwidth_gbps", where) * 1e9,
        interconnect_bandwidth=interconnect,
        interconnect_latency_s=latency_us * 1e-6,
    )


def _read(file: Path, where: str) -> Any:
    if file.suffix.lower() == ".json":
        try:
            if file.stat().st_size > 1 << 20:
                raise DeviceFileError(f"{where}: larger than 1 MiB; a device file is a few lines")
            return json.loads(file.read_text(encoding="utf-8"), object_pairs_hook=unique_keys)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise DeviceFileError(f"{where} cannot be read as JSON: {exc}") from exc
    try:
        return load_yaml_file(file, where)
    except YamlInputError as exc:
        raise DeviceFileError(str(exc)) from exc


def _number(data: dict[str, Any], field: str, where: str) -> float:
    value = data[field]
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise DeviceFileError(f"{where}: {field} must be a positive number, got {value!r}")
    low, high, unit = DATASHEET_RANGES[field]
    if not low <= value <= high:
        bound = f"at most {high:g}" if value > high else f"at least {low:g}"
        raise DeviceFileError(f"{where}: {field} must be {bound} {unit} (any GPU's datasheet "
                              f"lies within {low:g} … {high:g}: check the unit), got {value!r}")
    return float(value)


def _memory(data: dict[str, Any], where: str) -> int:
    given = [k for k in ("memory_gib", "memory_bytes") if data.get(k) is not None]
    if len(given) != 1:
        raise DeviceFileError(
            f"{where}: give the GPU's memory once, as memory_gib or memory_bytes"
            + (" (not both)" if given else " (it lacks both)"))
    if given == ["memory_gib"]:
        return int(_number(data, "memory_gib", where) * GiB)
    return int(_number(data, "memory_bytes", where))
