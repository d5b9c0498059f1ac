"""The GPUs and models the simulated engine knows, and where it finds any other.

GPU figures are public datasheet numbers (dense tensor throughput, no sparsity).
Model figures are the facts of each model's ``config.json``, stored as such in
``models.json`` beside this module and read by :mod:`slotune.workers.sim.model_config` like
any other config; the parameter count is derived from them, so a model is added by
copying its config, not by guessing. A base model and its instruct variant share one
architecture entry.

Beyond the catalogue, :func:`get_model` takes a local model directory or a Hugging Face
name cached on this machine, and :func:`get_gpu` a device file of datasheet numbers
(:mod:`slotune.workers.sim.device_file`). What cannot be modelled is refused with
:class:`UnknownCatalogEntry` (or one of its subclasses, which name the file and field).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from slotune.workers.sim._specs import GiB, GPUSpec, ModelSpec, MoESpec, UnknownCatalogEntry
from slotune.workers.sim.device_file import is_device_file, load_device_file
from slotune.workers.sim.model_config import (
    cached_snapshot,
    hf_hub_cache,
    model_from_directory,
    model_spec_from_config,
)

__all__ = [
    "GPUS",
    "GPU_ALIASES",
    "MODELS",
    "GPUSpec",
    "GiB",
    "MoESpec",
    "ModelSpec",
    "UnknownCatalogEntry",
    "get_gpu",
    "get_model",
]

_TB = 1e12
_GB = 1e9

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("a100-80g", "NVIDIA A100-SXM4-80GB", 80 * GiB, 312 * _TB, None,
                2039 * _GB, 300 * _GB, 8e-6),
        GPUSpec("h100-sxm", "NVIDIA H100 80GB HBM3", 80 * GiB, 989 * _TB, 1979 * _TB,
                3350 * _GB, 450 * _GB, 6e-6),
        GPUSpec("h200", "NVIDIA H200", 141 * 10**9, 989 * _TB, 1979 * _TB,
                4800 * _GB, 450 * _GB, 6e-6),
        GPUSpec("l40s", "NVIDIA L40S", 48 * GiB, 362 * _TB, 733 * _TB,
                864 * _GB, 32 * _GB, 20e-6),
        GPUSpec("rtx4090", "NVIDIA GeForce RTX 4090", 24 * GiB, 165.2 * _TB, 330.3 * _TB,
                1008 * _GB, 32 * _GB, 20e-6),
    )
}

CPU = GPUSpec("cpu", "CPU (vLLM's CPU build)", 16 * GiB, 160 * 10**9, None, 20 * _GB,
              10 * _GB, 20e-6)
"""``gpu: cpu`` — vLLM's CPU build — as the simulator (and so the twin) sees it: nominal
figures of two AVX2 server cores (fp32 FMA, ~2.5 GHz) and their share of memory
bandwidth. A prior, not a measurement: the twin learns how far off it is."""

GPU_ALIASES = {
    "a100": "a100-80g", "a100_sxm": "a100-80g", "h100": "h100-sxm", "h100_sxm": "h100-sxm",
    "h200_sxm": "h200", "h200-sxm": "h200", "a100-sxm": "a100-80g", "4090": "rtx4090",
    "rtx-4090": "rtx4090",
}


def _catalogue_models() -> dict[str, ModelSpec]:
    text = (resources.files("slotune.workers.sim").joinpath("models.json")
            .read_text(encoding="utf-8"))
    entries: list[dict[str, Any]] = json.loads(text)["models"]
    return {
        e["name"]: model_spec_from_config(e["config"], name=e["name"],
                                          source=f"models.json entry {e['name']!r}",
                                          aliases=tuple(e.get("aliases", ())))
        for e in entries
    }


MODELS: dict[str, ModelSpec] = _catalogue_models()


def get_gpu(name: str) -> GPUSpec:
    """Look up a GPU by our name or a common alias (case-insensitive), or read the device
    file a name ending in ``.yaml``/``.yml``/``.json`` points to."""
    if is_device_file(name):
        return load_device_file(name.strip())
    key = name.strip().lower()
    key = GPU_ALIASES.get(key, key)
    if key == CPU.name:
        return CPU
    try:
        return GPUS[key]
    except KeyError:
        raise UnknownCatalogEntry(
            f"unknown GPU {name!r}; valid: {', '.join(sorted(GPUS))}, or the path of a "
            "device file of datasheet numbers (.yaml/.yml/.json)"
        ) from None


_PATH_PREFIXES = ("/", "~", "./", "../")


def get_model(name: str) -> ModelSpec:
    """A model, resolved in this order:

    1. a catalogue name or alias (case-insensitive);
    2. a local directory holding a ``config.json``: ``/abs``, ``~/…``, or ``./rel`` /
       ``../rel`` from the working directory (named by the path as given);
    3. a Hugging Face name whose snapshot is in the local cache (``$HF_HUB_CACHE``, else
       ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``); nothing is downloaded.

    A config.json the simulator cannot model raises its subclass ``ModelConfigError``.
    """
    stripped = name.strip()
    lowered = stripped.lower()
    for model in MODELS.values():
        if lowered == model.name.lower() or lowered in (a.lower() for a in model.aliases):
            return model
    if stripped.startswith(_PATH_PREFIXES):
        return model_from_directory(stripped)
    cached = cached_snapshot(stripped)
    if cached is not None:
        return cached
    raise UnknownCatalogEntry(
        f"unknown model {name!r}; valid: {', '.join(sorted(MODELS))}; a local directory "
        f"holding a config.json (/abs/path, ./rel or ~/…) or a Hugging Face name whose "
        f"snapshot is in the local cache ({hf_hub_cache()}) also works")
