"""The quality gate's settings: golden requests or an operator's command, for lossy knob
values."""

from __future__ import annotations

from typing import Any

from pydantic import (
    Field,
    ValidationInfo,
    model_validator,
)

from slotune.workers.contracts._base import _Strict
from slotune.workers.contracts.engine import (
    KnobValue,
)
from slotune.workers.trust import trust_of

# --- the quality gate (lossy knob values) --------------------------------------------------

GOLDEN_PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "Write a haiku about the ocean.",
    "def fibonacci(n):",
    "Translate to German: The weather is nice today.",
    "List three prime numbers greater than ten:",
    "Explain in one sentence why the sky is blue.",
    "Once upon a time, in a small village,",
    "SELECT name, email FROM users WHERE",
    "The three laws of thermodynamics are",
    "Summarise the plot of Hamlet in two sentences.",
    "import numpy as np\n# compute the mean of an array",
    "Q: What is 17 multiplied by 23?\nA:",
    "A good code review comment is one that",
    "The difference between TCP and UDP is",
    "Dear customer, thank you for your order.",
    "In 1969, the Apollo 11 mission",
)
"""The built-in golden requests: short, varied prompts (facts, code, maths, chat) whose
greedy continuations a lossless and a lossy configuration are compared on."""


class GoldenCheck(_Strict):
    """Golden requests: fixed prompts, greedy decoding (temperature 0), the first
    ``max_tokens`` tokens compared position by position with the lossless baseline's."""

    prompts: tuple[str, ...] = Field(GOLDEN_PROMPTS, min_length=1, max_length=1000)
    max_tokens: int = Field(32, ge=1, le=4096)
    min_agreement: float = Field(0.9, gt=0, le=1)
    """The share of compared tokens that must agree for the check to pass."""


class CommandCheck(_Strict):
    """A user's quality command (an argv list, never a shell string), e.g. an
    lm-eval-harness run. ``{base_url}`` and ``{model}`` in an argument are replaced by
    the booted engine's URL and served model name (also in ``SLOTUNE_BASE_URL`` and
    ``SLOTUNE_MODEL``); the last number it prints on stdout is its score.

    Or a command the operator registered (``SLOTUNE_QUALITY_COMMANDS``), by ``name``:
    its argv and timeout are filled in where the space is read (the only way over the
    API, :mod:`slotune.workers.trust`), and kept with the name."""

    name: str | None = None
    """The registered command this is (None: the space gave its own argv)."""
    argv: tuple[str, ...] = Field(min_length=1)
    min_score: float = Field(allow_inf_nan=False)
    """The score at or above which the check passes."""
    timeout_s: float = Field(3600.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _registered(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        return trust_of(info).quality_command(data, "quality.command")


class QualityGate(_Strict):
    """What a lossy configuration must pass before it may score: one check (golden
    requests or a command), the knob values that make it lossy, and the lossless values
    its baseline runs with."""

    lossy: tuple[str, ...] = Field(min_length=1)
    """What makes the configuration lossy, as ``flag=value`` (``quantization=fp8``)."""
    baseline: dict[str, KnobValue]
    """The lossless values of those flags: the baseline is this configuration with them."""
    golden: GoldenCheck | None = None
    command: CommandCheck | None = None
    allow_lossy: bool = False
    """Skip the check (``--allow-lossy``): the configuration scores, unchecked."""
    reference: tuple[tuple[int, ...], ...] | None = None
    """The baseline's golden outputs (token ids per prompt), when already known; None:
    the trial boots the baseline first and measures them."""
    reference_unavailable: str | None = None
    """Why the sweep's baseline could not answer (it failed to boot or to answer): the
    check cannot run, and the trial does not boot the baseline again to find out."""

    @property
    def awaits_reference(self) -> bool:
        """A golden check that is to run and knows neither the baseline's answers nor why
        there are none: the baseline must answer before this configuration is checked."""
        return (self.golden is not None and not self.allow_lossy and self.reference is None
                and self.reference_unavailable is None)

    @model_validator(mode="after")
    def _one_check(self) -> QualityGate:
        if (self.golden is None) == (self.command is None):
            raise ValueError("a quality gate needs exactly one check: golden or command")
        if self.reference is not None and self.golden is not None \
                and len(self.reference) != len(self.golden.prompts):
            raise ValueError(f"reference has {len(self.reference)} outputs for "
                             f"{len(self.golden.prompts)} golden prompts")
        return self
