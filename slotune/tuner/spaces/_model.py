"""Search spaces: which engine flags to search, over which values, under which rules.

A space is a YAML file (``search_spaces/*.yaml``) validated into :class:`SearchSpace`.
Knobs are vLLM argument names; each has a type (``int``, ``float``, ``log``,
``categorical``, ``bool``, ``values``) and an optional ``default`` — the engine's own
default, which strategies try first. Rules are checked before anything boots: vLLM's
two cross-knob checks are built in, the space adds its own.

A simulated space (``engine: sim``) models any model the simulator can read — a
catalogue name, ``model: ./my-model`` (a directory with a ``config.json``, relative to
the space file) or a Hugging Face name cached locally — on a catalogue GPU or a device
file of datasheet numbers, ``gpu: ./b200.yaml`` (relative to the space file;
:mod:`slotune.workers.sim.device_file`). Both paths are stored absolute, so the trial specs
carry them to the workers; a config.json or device file the simulator cannot use is a
space error naming the file and the field.

What a space may name depends on who gives it (:mod:`slotune.workers.trust`): a file on the
CLI's machine may name any path and executable; a space posted to the API names files
inside the operator's data directories and executables the operator registered
(``engine_binary``, ``quality.command.name``), resolved here and stored resolved. No
space sets an engine argument that carries a secret (``api_key``, ``hf_token``, …): it
would be stored and shown; it goes through the worker's environment.

Checked at load time, so a bad space fails in a second instead of after a boot: every
knob and fixed argument is one the engine takes (or is declared in
``allowed_extra_args``); counts (``max_num_seqs``, ``max_model_len``, …) are integers
>= 1; ``gpu_memory_utilization`` is in (0, 1]; ``max_model_len`` fits the model's
context window when the simulator knows the model. Files are read with
:func:`slotune.workers.safe_yaml.load_yaml_file` (1 MiB, no aliases, no language tags).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import optuna
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from slotune.tuner.spaces._expr import Rule, RuleError
from slotune.workers.contracts import (
    SLO,
    CapacitySearch,
    CommandCheck,
    EngineChoice,
    EngineOptions,
    GoldenCheck,
    KnobValue,
    ObjectiveMode,
    QualityGate,
    TrialSpec,
    Workload,
    engine_flags,
)
from slotune.workers.engines import ENGINES
from slotune.workers.engines.redact import is_secret_arg
from slotune.workers.loadgen.generate.workload_files import (
    WorkloadError,
    builtin_workloads,
    load_workload,
    parse_workload,
)
from slotune.workers.safe_yaml import YamlInputError, load_yaml_file
from slotune.workers.sim.catalog import (
    GPUS,
    MODELS,
    ModelSpec,
    UnknownCatalogEntry,
    get_gpu,
    get_model,
)
from slotune.workers.sim.device_file import is_device_file
from slotune.workers.sim.model_config import ModelConfigError
from slotune.workers.trust import OPERATOR, Trust, TrustError, trust_of

__all__ = [
    "BUILTIN_RULES",
    "DEFAULT_LOSSY",
    "KNOB_TYPES",
    "Knob",
    "LossyValues",
    "QualitySettings",
    "SearchSpace",
    "SpaceError",
    "load_space",
    "parse_space",
]

KNOB_TYPES = ("int", "float", "log", "categorical", "bool", "values")

BUILTIN_RULES: tuple[str, ...] = (
    "max_num_batched_tokens >= max_num_seqs",
    "enable_chunked_prefill or max_num_batched_tokens >= max_model_len",
)
"""vLLM's own cross-knob checks (SchedulerConfig): a config breaking one never boots."""

# vLLM's defaults for the names the built-in rules read, when neither knob nor fixed sets them.
_ENGINE_DEFAULTS: dict[str, KnobValue] = {"enable_chunked_prefill": True}


class SpaceError(ValueError):
    """A space file that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _KnobBase(_Strict):
    default: KnobValue = None
    """The engine's default (tried first). None: the knob has no default to enqueue."""
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _null_default_is_none(cls, data: Any) -> Any:
        # A space stored before dumps left an unset default out carries ``default: null``
        # on every knob: that is no default, unless null is one of the knob's own values
        # (``quantization: [null, fp8]``: the checkpoint's own weights).
        if isinstance(data, dict) and "default" in data and data["default"] is None \
                and None not in (data.get("values") or data.get("choices") or ()):
            return {k: v for k, v in data.items() if k != "default"}
        return data

    @model_serializer(mode="wrap")
    def _unset_default_left_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A knob without a default takes its first value (SearchSpace.defaults): a dump
        # that wrote the field's None would read back as a default of None.
        data = handler(self)
        if isinstance(data, dict) and "default" not in self.model_fields_set:
            data.pop("default", None)
        return data


class IntKnob(_KnobBase):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)


class FloatKnob(_KnobBase):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(None, gt=0)


class LogKnob(_KnobBase):
    """Log-uniform; integer-valued when ``low`` and ``high`` are both integers."""

    type: Literal["log"]
    low: float = Field(gt=0)
    high: float = Field(gt=0)
    integer: bool = False


class CategoricalKnob(_KnobBase):
    type: Literal["categorical"]
    choices: tuple[KnobValue, ...] = Field(min_length=1)


class BoolKnob(_KnobBase):
    type: Literal["bool"]


class ValuesKnob(_KnobBase):
    """An explicit, ordered list of values (the grid a person would write by hand)."""

    type: Literal["values"]
    values: tuple[KnobValue, ...] = Field(min_length=1)


Knob = Annotated[
    IntKnob | FloatKnob | LogKnob | CategoricalKnob | BoolKnob | ValuesKnob,
    Field(discriminator="type"),
]


def _check_range(name: str, knob: Knob) -> None:
    if isinstance(knob, IntKnob | FloatKnob | LogKnob) and knob.low > knob.high:
        raise ValueError(f"knob {name!r}: low ({knob.low}) must be <= high ({knob.high})")


_COUNT_ARGS = frozenset({"max_num_seqs", "max_num_batched_tokens", "max_model_len",
                         "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                         "block_size"})
"""Engine arguments that are counts: integers >= 1 (None leaves the engine's default)."""


def _knob_values(knob: Knob) -> list[KnobValue]:
    """The values of a knob worth checking: all of a finite one, the ends of a range."""
    choices = knob_choices(knob)
    if choices is not None and len(choices) <= 10_000:
        return choices
    if isinstance(knob, IntKnob | FloatKnob | LogKnob):
        return [knob.low, knob.high]
    return []  # pragma: no cover - finite knobs have choices


def _check_value(name: str, value: KnobValue, facts: ModelSpec | None,
                 model: str) -> str | None:
    """Why ``value`` is absurd for engine argument ``name``, or None when it is plausible.
    ``facts``: the model's architecture where the simulator can read it."""
    context_len = None if facts is None else facts.max_position_embeddings
    if value is None:
        return None
    if name in _COUNT_ARGS and (isinstance(value, bool) or not isinstance(value, int)
                                or value < 1):
        return f"{name} must be an integer >= 1, got {value!r}"
    if name == "gpu_memory_utilization" and (
            isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 < value <= 1):
        return (f"gpu_memory_utilization is the share of GPU memory the engine may use and "
                f"must be in (0, 1], got {value!r}")
    if (name == "max_model_len" and context_len is not None and isinstance(value, int)
            and value > context_len):
        return (f"max_model_len {value} is beyond {model}'s context window "
                f"({context_len} tokens, max_position_embeddings); use at most {context_len}")
    if name == "enable_expert_parallel" and value is True and facts is not None \
            and facts.moe is None:
        return (f"{model} has no experts (its config.json declares no mixture-of-experts "
                "layers): expert parallelism has nothing to split")
    return None


def knob_choices(knob: Knob) -> list[KnobValue] | None:
    """Every value of a finite knob in its natural order, or None for a continuous one."""
    if isinstance(knob, ValuesKnob):
        return list(knob.values)
    if isinstance(knob, CategoricalKnob):
        return list(knob.choices)
    if isinstance(knob, BoolKnob):
        return [False, True]
    if isinstance(knob, IntKnob):
        return list(range(knob.low, knob.high + 1, knob.step))
    if isinstance(knob, FloatKnob) and knob.step is not None:
        n = math.floor((knob.high - knob.low) / knob.step + 1e-9)
        return [round(knob.low + i * knob.step, 10) for i in range(n + 1)]
    if isinstance(knob, LogKnob) and knob.integer:
        low, high = int(knob.low), int(knob.high)
        out: list[KnobValue] = []
        v = low
        while v <= high:  # powers of two from low: how people sweep batch-like knobs
            out.append(v)
            v *= 2
        return out
    return None


def distribution(knob: Knob) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution of a knob."""
    d = optuna.distributions
    if isinstance(knob, IntKnob):
        return d.IntDistribution(knob.low, knob.high, step=knob.step)
    if isinstance(knob, FloatKnob):
        return d.FloatDistribution(knob.low, knob.high, step=knob.step)
    if isinstance(knob, LogKnob):
        if knob.integer:
            return d.IntDistribution(int(knob.low), int(knob.high), log=True)
        return d.FloatDistribution(knob.low, knob.high, log=True)
    choices = knob_choices(knob)
    assert choices is not None
    return d.CategoricalDistribution(choices)  # type: ignore[arg-type]


class LossyValues(_Strict):
    """Which values of one engine flag change the numbers the model computes."""

    values: tuple[KnobValue, ...] | None = None
    """The lossy values; None: every value but ``lossless``. ``[]``: none (lossless)."""
    lossless: KnobValue = None
    """The value the lossless baseline runs with."""

    def is_lossy(self, value: KnobValue) -> bool:
        if self.values is None:
            return value != self.lossless
        return value in self.values


DEFAULT_LOSSY: dict[str, LossyValues] = {
    "quantization": LossyValues(values=None, lossless=None),
    "kv_cache_dtype": LossyValues(values=("fp8", "fp8_e4m3", "fp8_e5m2"), lossless="auto"),
}
"""Lossy by default: any weight quantisation (the baseline: the checkpoint's own dtype)
and an fp8 KV cache (baseline ``auto``). Speculative decoding is not: vLLM's rejection
sampling keeps the target model's distribution, so a space marks it only where its
method is not exact. A space's ``lossy`` entry replaces the default for its flag."""


class QualitySettings(_Strict):
    """How a lossy configuration is checked before it may score: golden requests (the
    default) or a command; ``allow_lossy`` skips the check (the report says so)."""

    golden: GoldenCheck | None = None
    command: CommandCheck | None = None
    allow_lossy: bool = False

    @model_validator(mode="after")
    def _one_check(self) -> QualitySettings:
        if self.golden is not None and self.command is not None:
            raise ValueError("give one quality check, golden or command, not both")
        return self

    def gate(self, lossy: tuple[str, ...], baseline: dict[str, KnobValue]) -> QualityGate:
        golden = self.golden if self.golden is not None or self.command is not None \
            else GoldenCheck()
        return QualityGate(lossy=lossy, baseline=baseline, golden=golden,
                           command=self.command, allow_lossy=self.allow_lossy)


class SearchSpace(EngineChoice):
    """One search space: engine, model, GPU, fixed args, knobs, rules and defaults.

    Its ``engine`` and ``options`` are an :class:`~slotune.workers.contracts.EngineChoice`, as its
    trials' are: a file writes the options as before, ``sim: {seed, noise, time_scale,
    cost_model}`` for the simulated engine and ``engine_binary:`` for vLLM (or
    ``options: {…}``, any engine)."""

    owner: ClassVar[str] = "space"

    name: str = Field(min_length=1)
    description: str = ""
    model: str = Field(min_length=1)
    """A Hugging Face name, or a model directory: ``/abs`` (as the workers see it), or
    ``./rel`` / ``~/…`` on this machine (relative to the space file; must hold a
    ``config.json``; stored absolute). sim: a name the simulator knows (its catalogue,
    or cached locally) or a directory whose ``config.json`` it can model."""
    gpu: str = "h100-sxm"
    """sim: a catalogue GPU (``--sim-gpu``; earlier spaces gave it as ``sim.gpu``), or a
    device file of datasheet numbers (``./b200.yaml``, relative to the space file;
    stored absolute). vllm: the GPU kind the trials run on (a catalogue name or any
    label, e.g. ``b200``), or ``cpu`` for vLLM's CPU build."""
    fixed: dict[str, KnobValue] = Field(default_factory=dict)
    knobs: dict[str, Knob] = Field(min_length=1)
    constraints: tuple[str, ...] = ()
    allowed_extra_args: tuple[str, ...] = ()
    workload: str | Workload = "lab"
    slo: str | SLO = "ttft:300,tpot:50"
    mode: ObjectiveMode = "goodput"
    capacity: CapacitySearch = Field(default_factory=CapacitySearch)
    lossy: dict[str, LossyValues] = Field(default_factory=dict)
    """Flags whose values are lossy, over :data:`DEFAULT_LOSSY` (e.g. ``dtype: {values:
    [bfloat16], lossless: float32}``)."""
    quality: QualitySettings = Field(default_factory=QualitySettings)

    _rules: tuple[Rule, ...] = PrivateAttr(default=())

    @field_validator("gpu")
    @classmethod
    def _gpu_name(cls, value: str, info: ValidationInfo) -> str:
        if is_device_file(value):
            trust = trust_of(info)
            path = trust.path(value, "gpu", _base_dir(info))
            try:
                get_gpu(str(path))  # refused now, naming the field, not on every worker later
            except UnknownCatalogEntry as exc:
                raise ValueError(trust.public(str(exc), {path: value})) from None
            return str(path)
        try:
            return get_gpu(value).name
        except UnknownCatalogEntry:
            pass
        if not _LABEL.fullmatch(value):
            raise ValueError(f"GPU {value!r} is not a name: use lower-case letters, digits and "
                             f"'-' (e.g. {', '.join(sorted(GPUS))}, or cpu for vllm)")
        return value  # an uncatalogued kind: only the vllm engine takes it (checked below)

    @field_validator("model", mode="after")
    @classmethod
    def _model_path(cls, value: str, info: ValidationInfo) -> str:
        trust = trust_of(info)
        relative = value.startswith(("./", "../", "~"))
        if not relative and not (trust.client and value.startswith("/")):
            return value  # a Hugging Face name, or a directory on the workers (absolute)
        path = trust.path(value, "model", _base_dir(info))
        if not (path / "config.json").is_file():
            # as given, never resolved: where a path leads is not for the message to say
            raise ValueError(f"model directory {value!r} has no config.json; give a "
                             "Hugging Face name or a directory holding the model's files")
        return str(path)

    @field_validator("workload", mode="before")
    @classmethod
    def _workload(cls, value: object, info: ValidationInfo) -> object:
        trust = trust_of(info)
        if isinstance(value, str):  # read when a trial spec is made: a client's must ship
            return trust.shipped(value, "workload", builtin_workloads())
        if isinstance(value, dict):
            context = info.context or {}
            try:
                return parse_workload(value, "workload", context.get("base_dir"),
                                      stored=bool(context.get("stored")), trust=trust)
            except WorkloadError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("slo", mode="before")
    @classmethod
    def _slo_text(cls, value: object) -> object:
        if isinstance(value, str):
            SLO.parse(value)  # fail at load time, with SLO.parse's own message
        return value

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> SearchSpace:
        for name, knob in self.knobs.items():
            _check_range(name, knob)
            choices = knob_choices(knob)
            if (choices is not None and "default" in knob.model_fields_set
                    and knob.default not in choices):
                raise ValueError(f"knob {name!r}: default {knob.default!r} is not one of its "
                                 f"values {choices}; add it (it is tried first)")
            if name in self.fixed:
                raise ValueError(f"{name!r} is both a knob and a fixed argument; keep one")
        self._check_device(trust_of(info))
        stored = bool((info.context or {}).get("stored"))
        self._check_engine_args(stored=stored)
        if self.mode == "capacity" and not stored:  # stored spaces ran before: read as is
            problem = self.capacity.unable(self.resolve_slo().percentile)
            if problem:
                raise ValueError(problem)
        known = set(self.knobs) | set(self.fixed) | set(_ENGINE_DEFAULTS)
        known |= {"max_num_seqs", "max_num_batched_tokens", "max_model_len"}
        try:
            rules = [Rule.parse(t, known) for t in (*BUILTIN_RULES, *self.constraints)]
        except RuleError as exc:
            raise ValueError(str(exc)) from None
        self._rules = tuple(rules)
        return self

    def _check_device(self, trust: Trust) -> None:
        simulated = ENGINES[self.engine].simulated
        if simulated and self.gpu not in GPUS and not is_device_file(self.gpu):
            raise ValueError(f"gpu {self.gpu!r}: the simulated engine models catalogue GPUs "
                             f"({', '.join(sorted(GPUS))}) or a device file of datasheet "
                             "numbers (./my-gpu.yaml)")
        if not simulated and is_device_file(self.gpu):
            raise ValueError(f"gpu {self.gpu!r}: a device file describes a GPU to the "
                             f"simulated engine; engine {self.engine} takes the GPU kind its "
                             "trials run on (a name such as b200)")
        if simulated:
            try:
                get_model(self.model)
            except ModelConfigError as exc:
                raise ValueError(trust.public(str(exc))) from None  # the file and the field
            except UnknownCatalogEntry as exc:
                if trust.client:  # not where the server keeps its Hugging Face cache
                    raise ValueError(
                        f"unknown model {self.model!r}; valid: {', '.join(sorted(MODELS))}, "
                        "a Hugging Face name cached on the server, or a model directory "
                        "in the data directories (./name) (engine: vllm serves any model)"
                    ) from None
                raise ValueError(f"{exc} (engine: vllm serves any model)") from None

    def _check_engine_args(self, *, stored: bool) -> None:
        """Every argument is one the engine takes, with a plausible value, and none
        carries a secret (a space is stored and shown to every reader; a space stored
        before this rule still loads). A flag (``hf_token: true``: use the worker's
        login) carries none."""
        values = {**{n: [v] for n, v in self.fixed.items()},
                  **{n: knob_choices(k) or [""] for n, k in self.knobs.items()}}
        secret = sorted(name for name, given in values.items() if is_secret_arg(name)
                        and any(not isinstance(v, bool | None) for v in given))
        if secret and not stored:
            raise ValueError(
                f"{', '.join(secret)}: an engine argument that carries a secret is never "
                "part of a space (spaces and trials are stored and shown to every reader); "
                "pass it through the worker's environment instead (vLLM reads "
                "VLLM_API_KEY for --api-key and HF_TOKEN for --hf-token; the engine "
                "inherits the worker's VLLM_* and HF_* variables)")
        known = ENGINES[self.engine].known_args | set(self.allowed_extra_args)
        unknown = sorted((set(self.knobs) | set(self.fixed)) - known)
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not an argument the {self.engine} engine takes; "
                f"valid: {', '.join(sorted(known))} (or declare it in allowed_extra_args)")
        try:
            facts: ModelSpec | None = get_model(self.model)
        except UnknownCatalogEntry:
            facts = None  # a model we have no facts for: the engine checks it
        checks = [(n, v, "fixed") for n, v in self.fixed.items()]
        checks += [(n, v, "knob") for n, k in self.knobs.items() for v in _knob_values(k)]
        for name, value, where in checks:
            problem = _check_value(name, value, facts, self.model)
            if problem:
                raise ValueError(f"{where} {name!r}: {problem}")

    # --- the space ---------------------------------------------------------------------

    @property
    def rules(self) -> tuple[str, ...]:
        """Every rule checked before boot: vLLM's built-in ones, then the space's."""
        return tuple(r.text for r in self._rules)

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        return {name: distribution(knob) for name, knob in self.knobs.items()}

    def defaults(self) -> dict[str, KnobValue]:
        """The engine's defaults for every knob that declares one (the baseline config).

        A knob without a default takes its first value (finite) or its low end.
        """
        out: dict[str, KnobValue] = {}
        for name, knob in self.knobs.items():
            if "default" in knob.model_fields_set:
                out[name] = knob.default
            else:
                choices = knob_choices(knob)
                out[name] = choices[0] if choices else knob.low  # type: ignore[union-attr]
        return out

    def choices(self, name: str) -> list[KnobValue] | None:
        """The values of one knob in order, or None when it is continuous."""
        return knob_choices(self.knobs[name])

    def is_finite(self) -> bool:
        return all(knob_choices(k) is not None for k in self.knobs.values())

    def grid(self) -> Iterator[dict[str, KnobValue]]:
        """Every configuration in the natural order (last knob fastest), as auto_tune does."""
        lists = []
        for name, knob in self.knobs.items():
            values = knob_choices(knob)
            if values is None:
                raise SpaceError(
                    f"space {self.name!r}: knob {name!r} is continuous ({knob.type} without "
                    "a step); a grid needs every knob finite (values, categorical, bool, int, "
                    "float with step, log with integer: true)"
                )
            lists.append(values)
        for combo in itertools.product(*lists):
            yield dict(zip(self.knobs, combo, strict=True))

    def grid_size(self) -> int:
        return math.prod(len(knob_choices(k) or ()) for k in self.knobs.values())

    def engine_values(self, params: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
        """What the engine would run with: vLLM defaults < fixed args < sampled knobs."""
        return {**_ENGINE_DEFAULTS, **self.flags(params)}

    def flags(self, params: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
        """The engine flags of ``params``: fixed args overridden by the sampled knobs."""
        return engine_flags(self.fixed, params)

    def allowing_lossy(self) -> SearchSpace:
        """This space with its lossy values let through unchecked (``--allow-lossy``)."""
        return self.model_copy(update={
            "quality": self.quality.model_copy(update={"allow_lossy": True})})

    def quality_gate(self, params: Mapping[str, KnobValue]) -> QualityGate | None:
        """The check a configuration must pass before it scores (None: it is lossless)."""
        flags = self.flags(params)
        rules = {**DEFAULT_LOSSY, **self.lossy}
        lossy = {name: rule for name, rule in rules.items()
                 if name in flags and rule.is_lossy(flags[name])}
        if not lossy:
            return None
        return self.quality.gate(tuple(f"{name}={flags[name]}" for name in lossy),
                                 {name: rule.lossless for name, rule in lossy.items()})

    def quality_baseline(self, lossy: TrialSpec, run_id: str) -> TrialSpec:
        """The lossless baseline a sweep measures once for ``lossy``'s quality gate: every
        knob at its default, every lossy value of those and of the fixed args at its
        lossless value — the same configuration for every lossy trial of the sweep, so
        one boot answers for all (greedy answers do not depend on the scheduling knobs).
        Defaults that break a rule of the space fall back to ``lossy``'s own baseline
        (the trial with its lossless values), which the engine is sure to accept as
        far as the rules know."""
        assert lossy.quality is not None and lossy.quality.golden is not None
        defaults = self.defaults()
        if self.check(defaults) is None:
            spec = self.to_trial_spec(defaults, run_id, workload=lossy.workload,
                                      slo=lossy.slo)
            spec = spec.baseline() if spec.quality is not None else spec
        else:
            spec = lossy.baseline()
        return spec.model_copy(update={"run_id": run_id, "quality": None,
                                       "golden_reference": lossy.quality.golden})

    def check(self, params: Mapping[str, KnobValue]) -> str | None:
        """The text of the first rule ``params`` break, or None when all hold.

        A rule over an argument left to the engine's default (e.g. ``max_model_len``
        unset) cannot be decided here and holds; the engine's own check still applies.
        """
        values = self.engine_values(params)
        for rule in self._rules:
            if not rule.holds(values):
                return rule.text
        return None

    # --- trial specs -------------------------------------------------------------------

    def resolve_workload(self, workload: Workload | str | None = None) -> Workload:
        chosen = self.workload if workload is None else workload
        if isinstance(chosen, Workload):
            return chosen
        return load_workload(chosen)[0]

    def resolve_slo(self, slo: SLO | str | None = None) -> SLO:
        chosen = self.slo if slo is None else slo
        return chosen if isinstance(chosen, SLO) else SLO.parse(chosen)

    def to_trial_spec(
        self,
        params: Mapping[str, KnobValue],
        run_id: str,
        workload: Workload | str | None = None,
        slo: SLO | str | None = None,
        mode: ObjectiveMode | None = None,
        *,
        options: EngineOptions | None = None,
        capacity: CapacitySearch | None = None,
        **overrides: Any,
    ) -> TrialSpec:
        """A :class:`TrialSpec` for ``params`` (knob values) with this space's fixed args.

        ``workload``/``slo``/``mode``/``options`` (the engine's) default to the space's;
        ``overrides`` go to the TrialSpec as is (timeouts, early_abort, …).
        """
        unknown = set(params) - set(self.knobs)
        if unknown:
            raise SpaceError(
                f"space {self.name!r}: {', '.join(sorted(unknown))} is not a knob; "
                f"valid: {', '.join(self.knobs)}"
            )
        return TrialSpec(
            run_id=run_id,
            engine=self.engine,
            model=self.model,
            knobs=dict(params),
            engine_args=dict(self.fixed),
            allowed_extra_args=self.allowed_extra_args,
            workload=self.resolve_workload(workload),
            slo=self.resolve_slo(slo),
            mode=mode or self.mode,
            capacity=capacity or self.capacity,
            gpu=self.gpu,
            options=options or self.options,
            device="cpu" if self.gpu == CPU_DEVICE else "gpu",
            **{"quality": self.quality_gate(params), **overrides},
        )


CPU_DEVICE = "cpu"
_LABEL = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def _base_dir(info: ValidationInfo) -> Path | None:
    """The space file's directory (``base_dir`` in the validation context), from which
    the operator's relative paths are taken."""
    base = (info.context or {}).get("base_dir")
    return Path(base) if base is not None else None


# --- loading -----------------------------------------------------------------------------


_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def _format(exc: ValidationError, where: str) -> str:
    lines = []
    for err in exc.errors():
        # A key that is no field name is a line of some other file (``--space
        # /etc/shadow``): say so, never echo it.
        loc = ".".join(str(p) if _FIELD_NAME.fullmatch(str(p)) or isinstance(p, int)
                       else "(a key that is not a field name)" for p in err["loc"]) \
            or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "union_tag_invalid":
            msg = f"unknown knob type; valid: {', '.join(KNOB_TYPES)}"
        elif err["type"] == "union_tag_not_found":
            msg = f"a knob needs 'type' (one of {', '.join(KNOB_TYPES)})"
        lines.append(f"{where}: {loc}: {msg}")
    return "\n".join(lines)


def parse_space(data: Any, where: str = "space", base_dir: Path | None = None, *,
                stored: bool = False, trust: Trust = OPERATOR) -> SearchSpace:
    """Validate loaded YAML data; errors name ``where`` and the field.

    ``base_dir`` (the space file's directory) is where an inline workload's trace may live.
    ``stored`` reads a space slotune stored after checking it at the edge: its trace
    paths passed the trace rule then and are not judged again (the coordinator that
    runs it need not share the submitter's ``$SLOTUNE_HOME``). ``trust`` says who gives
    the space, so what its fields may name (:mod:`slotune.workers.trust`): the operator by
    default, an API client at the API.
    """
    if not isinstance(data, dict):
        raise SpaceError(f"{where}: a search space is a mapping of fields, "
                         f"got {type(data).__name__}")
    try:
        return SearchSpace.model_validate(data, context=trust.context(base_dir=base_dir,
                                                                      stored=stored))
    except ValidationError as exc:
        raise SpaceError(trust.public(_format(exc, where))) from None


SHIPPED_SPACES = Path(__file__).resolve().parents[3] / "search_spaces"


def load_space(name_or_path: str | Path, folder: Path | None = None, *,
               trust: Trust = OPERATOR) -> SearchSpace:
    """A space by file path, or by name from ``search_spaces/`` (``lab`` → ``lab.yaml``).

    A client (``trust``) names a shipped space only; the file, shipped, is the operator's.
    """
    base = folder or SHIPPED_SPACES
    if trust.client:
        shipped = [p.stem for p in base.glob("*.yaml")] if base.is_dir() else []
        try:
            name_or_path = trust.shipped(str(name_or_path), "space", shipped)
        except TrustError as exc:
            raise SpaceError(str(exc)) from None
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = base / f"{name_or_path}.yaml"
        if not path.is_file():
            valid = sorted(p.stem for p in base.glob("*.yaml")) if base.is_dir() else []
            raise SpaceError(f"unknown search space {str(name_or_path)!r}; valid: "
                             f"{', '.join(valid) or '(none found in ' + str(base) + ')'}")
    if not path.is_file():
        raise SpaceError(f"search space file {path} does not exist")
    try:
        data = load_yaml_file(path)
    except YamlInputError as exc:
        raise SpaceError(str(exc)) from None
    return parse_space(data, str(path), path.resolve().parent)
