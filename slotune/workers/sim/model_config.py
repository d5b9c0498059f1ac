"""A model's architecture from its Hugging Face ``config.json``, or a refusal that says why.

The simulator needs a model's shape, nothing else: the width and depth of its layers,
its attention heads (query, key-value, their size), its MLP width, vocabulary and
context window. :func:`model_spec_from_config` reads them from a ``config.json`` dict
for the dense decoder families vLLM users serve most (:data:`SUPPORTED_MODEL_TYPES`),
filling what a file leaves out with the default of that family's Hugging Face config
class (so the simulator sees the model ``transformers`` and vLLM load):

====* **Mixtral** (``mixtral``): ``num_local_experts`` routed experts of
  ``intermediate_size``; every layer is MoE; no shared experts.
* **Qwen-MoE** (``qwen2_moe``, ``qwen3_moe``): ``num_experts`` (``num_local_experts``
  as transformers 5 saves Qwen3-MoE) of
  ``moe_intermediate_size``; Qwen2-MoE adds one shared expert of
  ``shared_expert_intermediate_size``; layer ``i`` is MoE unless it is in
  ``mlp_only_layers`` or ``(i + 1) % decoder_sparse_step`` is not 0.
* **DeepSeek** fields (``glm4_moe``): ``n_routed_experts`` of ``moe_intermediate_size``
  plus ``n_shared_experts`` of the same width; layer ``i`` is MoE when
  ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``.

and ``num_experts_per_tok`` is the top-k of all three. A dense layer of a MoE model has
an MLP of ``intermediate_size``. DeepSeek-V2/V3 themselves are refused: their attention
is multi-head latent attention (``kv_lora_rank``), whose compressed KV cache the
simulator does not model; GLM-4.5 (``glm4_moe``) uses the DeepSeek fields with grouped
attention and is modelled. A config that declares experts under any other
``model_type`` (gpt-oss, DBRX, …) is refused naming the field.

An expert count that is not a positive integer (``num_experts: 0``) and a
``torch_dtype`` (or ``dtype``) other than :data:`WEIGHT_DTYPES` are refused naming the
field: the first would price a MoE model as a dense one, the second is no model vLLM loads.

``num_key_value_heads`` defaults to ``num_attention_heads`` (multi-head attention), as
``LlamaConfig`` does; the other families' classes default it to a constant instead, but
their published configs always state it. The other facts are required: a config that
lacks one, experts outside the MoE families (:data:`MOE_FIELDS`), or any other
``model_type`` is refused with :class:`ModelConfigError`, naming the file and the
field, never guessed.

What the simulator does not model of these families, and prices as plain full
attention: sliding-window layers (Mistral v0.1, Gemma 2/3) hold a whole context of KV
in every layer, as vLLM did before its hybrid KV-cache manager; a ``rope_scaling``
that stretches the context window (YaRN) is not applied to ``max_position_embeddings``.

Where configs come from is :func:`slotune.workers.sim.catalog.get_model`'s business; this module
also finds a directory's ``config.json`` (:func:`model_from_directory`) and a Hugging
Face name's snapshot in the local cache (:func:`cached_snapshot`, never a download).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from slotune.workers.sim._specs import ModelSpec, MoESpec, UnknownCatalogEntry

__all__ = [
    "MOE_FIELDS",
    "SUPPORTED_MODEL_TYPES",
    "WEIGHT_DTYPES",
    "ModelConfigError",
    "cached_snapshot",
    "hf_hub_cache",
    "model_from_directory",
    "model_spec_from_config",
]


class ModelConfigError(UnknownCatalogEntry):
    """A ``config.json`` the simulator cannot model; the message names the file and field.

    A subclass of :class:`UnknownCatalogEntry`, so every caller that turns an unknown
    model into a refusal (a space error, an ``invalid_config`` trial) does the same here.
    """


@dataclass(frozen=True, slots=True)
class _Family:
    head_dim: int | None
    """Hugging Face's default when the file has no ``head_dim`` (None: hidden // heads)."""
    tie_word_embeddings: bool
    qkv_bias: str
    """``always`` (Qwen2's q/k/v projections), ``never``, or ``attention_bias`` (the flag)."""
    experts: str | None = None
    """How a MoE family states its experts: ``mixtral``, ``qwen`` or ``deepseek`` (see the
    module docstring); None for a dense family."""


_FAMILIES: dict[str, _Family] = {
    "llama": _Family(None, False, "attention_bias"),
    "mistral": _Family(None, False, "never"),
    "qwen2": _Family(None, False, "always"),
    "qwen3": _Family(128, False, "attention_bias"),
    "gemma": _Family(256, True, "attention_bias"),
    "gemma2": _Family(256, True, "attention_bias"),
    "gemma3_text": _Family(256, True, "attention_bias"),
    "mixtral": _Family(None, False, "never", "mixtral"),
    "qwen2_moe": _Family(None, False, "always", "qwen"),
    "qwen3_moe": _Family(128, False, "attention_bias", "qwen"),
    "glm4_moe": _Family(None, False, "attention_bias", "deepseek"),
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_FAMILIES))

MOE_FIELDS: tuple[str, ...] = ("num_experts", "num_local_experts", "n_routed_experts",
                               "moe_num_experts")
"""Fields by which Hugging Face configs declare experts (Qwen-MoE, Mixtral, DeepSeek, …)."""

WEIGHT_DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32")
"""The weight dtypes a ``config.json`` may state (``torch_dtype``): those vLLM serves."""
_DTYPE_ALIASES = ("half", "float")
"""vLLM's other spellings of float16 and float32."""

_UNMODELLED: dict[str, str] = {
    "kv_lora_rank": "multi-head latent attention (DeepSeek-V2/V3): its compressed KV cache "
                    "and attention cost are not modelled",
}
"""Fields whose presence (not null) means an architecture the simulator would misprice."""

_REQUIRED: dict[str, str] = {
    "hidden_size": "the width of every layer's weights",
    "num_hidden_layers": "the number of layers (weights and KV cache)",
    "num_attention_heads": "the attention's shape",
    "intermediate_size": "the MLP's weights and FLOPs",
    "vocab_size": "the embedding and LM-head weights",
    "max_position_embeddings": "the context window (max_model_len)",
}
"""The facts a config must state, and what the simulator needs each one for."""


def model_spec_from_config(config: Mapping[str, Any], *, name: str, source: str,
                           aliases: tuple[str, ...] = ()) -> ModelSpec:
    """The :class:`ModelSpec` of a ``config.json`` dict; :class:`ModelConfigError` when the
    simulator cannot model it. ``source`` says where the dict came from, for the message
    (``config.json at /models/x``)."""
    if not isinstance(config, Mapping):
        raise ModelConfigError(f"{source} is not a JSON object of model facts")
    for field, why in _UNMODELLED.items():
        if config.get(field) is not None:
            raise ModelConfigError(f"{source}: {field} ({config[field]!r}) declares {why}; "
                                   f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    model_type = config.get("model_type")
    if model_type is None:
        raise ModelConfigError(f"{source} lacks 'model_type', which the simulator needs to "
                               f"know the architecture; supported: "
                               f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    family = _FAMILIES.get(str(model_type))
    _check_declared(config, source)
    experts = [f for f in MOE_FIELDS if config.get(f)]
    if family is None:
        declared = f" (with experts: {', '.join(experts)})" if experts else ""
        raise ModelConfigError(
            f"{source}: model_type {model_type!r}{declared} is not an architecture the "
            f"simulator models; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if experts and family.experts is None:
        moe_types = sorted(t for t, f in _FAMILIES.items() if f.experts)
        raise ModelConfigError(
            f"{source} declares experts ({', '.join(experts)}) but model_type {model_type!r} "
            "is not a mixture-of-experts architecture the simulator models; supported "
            f"mixture-of-experts types: {', '.join(moe_types)}")
    facts = {field: _positive_int(config, field, source, why)
             for field, why in _REQUIRED.items()}
    heads = facts["num_attention_heads"]
    kv_heads = (heads if config.get("num_key_value_heads") is None
                else _positive_int(config, "num_key_value_heads", source, "grouped attention"))
    if heads % kv_heads:
        raise ModelConfigError(f"{source}: num_attention_heads ({heads}) is not a multiple of "
                               f"num_key_value_heads ({kv_heads})")
    if config.get("head_dim") is not None:
        head_dim = _positive_int(config, "head_dim", source, "the attention's shape")
    elif family.head_dim is not None:
        head_dim = family.head_dim
    else:
        if facts["hidden_size"] % heads:
            raise ModelConfigError(
                f"{source} lacks 'head_dim' and hidden_size ({facts['hidden_size']}) is not a "
                f"multiple of num_attention_heads ({heads}); state head_dim")
        head_dim = facts["hidden_size"] // heads
    return ModelSpec(
        name=name,
        hidden_size=facts["hidden_size"],
        num_layers=facts["num_hidden_layers"],
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=facts["intermediate_size"],
        vocab_size=facts["vocab_size"],
        max_position_embeddings=facts["max_position_embeddings"],
        tie_word_embeddings=_flag(config, "tie_word_embeddings", family.tie_word_embeddings,
                                  source),
        qkv_bias=(family.qkv_bias == "always" or (family.qkv_bias == "attention_bias"
                  and _flag(config, "attention_bias", False, source))),
        aliases=aliases,
        moe=None if family.experts is None else _moe_spec(
            config, family.experts, facts["num_hidden_layers"], source),
    )


def _check_declared(config: Mapping[str, Any], source: str) -> None:
    """Refuse what a config states that cannot be: an expert count that is not a positive
    integer (``num_experts: 0`` would price a MoE model as a dense one; a dense model
    states no expert count), a weight dtype vLLM does not serve (``torch_dtype``, or
    ``dtype`` as transformers 5 writes it)."""
    for field in MOE_FIELDS:
        if config.get(field) is not None:
            try:
                _positive_int(config, field, source, "the number of routed experts")
            except ModelConfigError as exc:
                raise ModelConfigError(f"{exc} (the number of routed experts; a dense model "
                                       f"leaves {field} out)") from None
    for field in ("torch_dtype", "dtype"):
        value = config.get(field)
        if value is not None and value not in (*WEIGHT_DTYPES, *_DTYPE_ALIASES):
            raise ModelConfigError(f"{source}: {field} {value!r} is not a dtype vLLM serves; "
                                   f"valid: {', '.join(WEIGHT_DTYPES)} (or "
                                   f"{', '.join(_DTYPE_ALIASES)})")


def _moe_spec(config: Mapping[str, Any], style: str, layers: int, source: str) -> MoESpec | None:
    """The experts of a MoE family's config (the module docstring's table); None when the
    config states no routed experts (a MoE family's file without an expert count)."""
    # transformers 5 saves Qwen3-MoE's experts as num_local_experts (num_experts is an
    # alias in its config class); published files say num_experts. Either counts.
    named = {"mixtral": ("num_local_experts",), "qwen": ("num_experts", "num_local_experts"),
             "deepseek": ("n_routed_experts", "num_local_experts")}[style]
    experts_field = next((f for f in named if config.get(f)), named[0])
    if not config.get(experts_field):
        if style == "mixtral":  # Mixtral without experts is not a model
            _positive_int(config, experts_field, source, "the number of experts")
        return None
    experts = _positive_int(config, experts_field, source, "the number of experts")
    top_k = _positive_int(config, "num_experts_per_tok", source, "the experts each token uses")
    if top_k > experts:
        raise ModelConfigError(f"{source}: num_experts_per_tok ({top_k}) exceeds "
                               f"{experts_field} ({experts})")
    width_field = "intermediate_size" if style == "mixtral" else "moe_intermediate_size"
    width = _positive_int(config, width_field, source, "the experts' weights and FLOPs")
    shared = 0
    if style == "qwen" and config.get("shared_expert_intermediate_size"):
        shared = _positive_int(config, "shared_expert_intermediate_size", source,
                               "the shared expert's weights")
    elif style == "deepseek" and config.get("n_shared_experts"):
        shared = width * _positive_int(config, "n_shared_experts", source,
                                       "the shared experts' weights")
    if style == "mixtral":
        moe_layers = layers
    elif style == "qwen":
        step = _optional_int(config, "decoder_sparse_step", 1, source)
        dense = config.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(isinstance(i, int) for i in dense):
            raise ModelConfigError(f"{source}: mlp_only_layers must be a list of layer "
                                   f"indices, got {dense!r}")
        moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    else:
        first = config.get("first_k_dense_replace") or 0
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise ModelConfigError(f"{source}: first_k_dense_replace must be an integer >= 0, "
                                   f"got {first!r}")
        freq = _optional_int(config, "moe_layer_freq", 1, source)
        moe_layers = sum(1 for i in range(layers) if i >= first and i % freq == 0)
    if moe_layers == 0:
        raise ModelConfigError(f"{source} declares {experts} experts but no layer uses them "
                               "(check decoder_sparse_step, mlp_only_layers, "
                               "first_k_dense_replace)")
    return MoESpec(num_experts=experts, experts_per_token=top_k, expert_intermediate_size=width,
                   num_moe_layers=moe_layers, shared_intermediate_size=shared)


def _optional_int(config: Mapping[str, Any], field: str, default: int, source: str) -> int:
    if config.get(field) is None:
        return default
    return _positive_int(config, field, source, "which layers are mixture-of-experts")


def model_from_directory(path: str) -> ModelSpec:
    """The model in a local directory (``/abs``, ``./rel`` from the working directory,
    or ``~/…``), named ``path`` as given."""
    directory = Path(path).expanduser().resolve()
    config = directory / "config.json"
    if not config.is_file():
        what = "has no config.json" if directory.is_dir() else "is not a directory"
        raise ModelConfigError(f"model directory {directory} {what}; the simulator reads the "
                               "model's shape from its config.json")
    return _read_config(str(config), path)


def hf_hub_cache() -> Path:
    """Where Hugging Face keeps downloaded models: ``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (huggingface_hub's own order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_REVISION = re.compile(r"[0-9a-fA-F]{7,64}")


def cached_snapshot(repo_id: str) -> ModelSpec | None:
    """The model of a Hugging Face name whose ``main`` snapshot is in the local cache
    (``models--{org}--{name}/refs/main`` → ``snapshots/{commit}/config.json``), or None.
    Nothing is downloaded."""
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        return None
    repo = hf_hub_cache() / f"models--{repo_id.replace('/', '--')}"
    try:
        revision = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not _REVISION.fullmatch(revision):
        return None  # not a commit hash: never let a file's text pick the path
    config = repo / "snapshots" / revision / "config.json"
    if not config.is_file():
        return None
    return _read_config(str(config), repo_id)


@cache
def _read_config(config_path: str, name: str) -> ModelSpec:
    # Cached by file: a simulator loop (or a sweep building a config per trial) asks for
    # the same model again and again; the file is read once per process.
    source = f"config.json at {Path(config_path).parent}"
    try:
        with open(config_path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{source} cannot be read as JSON: {exc}") from exc
    return model_spec_from_config(data, name=name, source=source)


def _positive_int(config: Mapping[str, Any], field: str, source: str, why: str) -> int:
    if field not in config or config[field] is None:
        raise ModelConfigError(f"{source} lacks {field!r}, which the simulator needs for {why}")
    value = config[field]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelConfigError(f"{source}: {field} must be a positive integer, got {value!r}")
    return value


def _flag(config: Mapping[str, Any], field: str, default: bool, source: str) -> bool:
    value = config.get(field)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ModelConfigError(f"{source}: {field} must be true or false, got {value!r}")
    return value
