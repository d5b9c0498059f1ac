"""Capacity mode's settings: the search (:class:`CapacitySearch`) and the sweep's ranking
probes, with the bounds that refuse a design that cannot give a verdict."""

from __future__ import annotations

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from slotune.workers.binomial import min_requests_to_pass
from slotune.workers.contracts._base import _Strict

MIN_RELATIVE_TOLERANCE = 0.01
"""The finest capacity interval a search may ask for: two probes 1 % apart differ by less
than an engine's own run-to-run noise, so finite probes cannot order them."""
PROBE_EXTENSIONS = 2
"""An undecided probe is extended this many times (by its first run's size) by default."""


class RankingProbes(_Strict):
    """How a sweep's search phase probes (:meth:`CapacitySearch.for_ranking`). Its readings
    only rank configurations: the number a sweep reports for its winner comes from
    confirmation runs with the full design on fresh samples, never from these."""

    confidence: float = Field(0.5, ge=0.5, le=0.999)
    """The verdicts' confidence while ranking: 0.5 (the default) reads each probe's own
    percentile against the target, the sharpest comparison a probe of the same size
    gives; the sample is the same for every configuration, so rankings are paired."""
    relative_tolerance: float = Field(0.1, ge=MIN_RELATIVE_TOLERANCE, lt=1)
    """The interval width ranking stops at (the search's own when that is coarser)."""
    extensions: int = Field(0, ge=0, le=20)
    """Extensions of an undecided ranking probe (0: it stays undecided)."""
    prompts_per_probe: int | None = Field(None, ge=1)
    """Requests of a ranking probe (None: as many as the search's own first run sends)."""


class CapacitySearch(_Strict):
    """Capacity mode: the highest request rate at which one replica holds the SLO, as an
    interval (:mod:`slotune.workers.trial.pipeline`): the highest rate shown to pass, the lowest
    shown to fail or left undecided, and the requests they rest on.

    Each rate is a *probe*, judged statistically (:mod:`slotune.workers.loadgen.score.verdict`): it
    passes only at steady state and when every SLO percentile's confidence bound is
    within target; a probe the sample cannot decide is extended with more requests at the
    same rate, up to ``max_prompts_per_probe``, and stays undecided past it — never a
    pass."""

    min_rate: float = Field(0.5, gt=0)
    max_rate: float = Field(256.0, gt=0)
    relative_tolerance: float = Field(0.05, gt=0, lt=1)
    """The interval's width at which the bisection stops (``high / low − 1``); at least
    :data:`MIN_RELATIVE_TOLERANCE`."""
    max_probes: int = Field(10, ge=2)
    """Rates probed at most (a probe's extensions are part of its probe)."""
    start_rate: float | None = Field(None, gt=0)
    """Where the bracket starts (None: the workload's rate). A sweep starts each trial
    where it predicts the capacity (the best so far, or the twin's prediction): a start
    saves probes, it cannot move the interval."""
    step: float = Field(2.0, gt=1, le=16)
    """The bracket's factor: up (or down) by this much until the verdict flips."""
    confidence: float = Field(0.95, ge=0.5, le=0.999)
    """How sure a verdict is: a probe passes when each SLO percentile's upper confidence
    bound at this level is within target (fails when its lower bound is over). 0.5 reads
    the sample's own percentile (a screening, not a measurement)."""
    prompts_per_probe: int | None = Field(None, ge=1)
    """Requests of a probe's first run (default: the workload's num_prompts); at least
    what a pass needs at ``confidence`` (p99 at 95 %: 299), and ``min_probe_s``."""
    extensions: int = Field(PROBE_EXTENSIONS, ge=0, le=20)
    """How many more runs (each of the first run's size, fresh requests) an undecided probe
    may pool before it stays undecided."""
    max_prompts_per_probe: int | None = Field(None, ge=1)
    """At most this many requests a probe (its runs together); None: no cap but
    ``extensions``."""
    min_probe_s: float | None = Field(None, gt=0, le=3600)
    """A probe at rate r sends at least r × this many requests (engine seconds of
    arrivals): a short burst above capacity ends before its queue builds up, so short
    probes overstate capacity, and more at high rates."""
    session_spans: float = Field(3.0, ge=0, le=100)
    """Conversations (``multi_turn``): a probe keeps sessions arriving for this many
    session lifetimes (:func:`slotune.workers.loadgen.generate.sessions.steady_arrivals_s`), so that
    the server spends most of it in the steady state of its rate; 0 sends the probe's prompt count
    as it is (a screening's cheap probe, which only ranks)."""
    sample_confidence: float | None = Field(None, ge=0.5, le=0.999)
    """Probes are sized as for verdicts at this confidence (None: their own): a ranking
    reads a sample as large as a measurement's, at its own lower confidence."""
    resolve_undecided: bool = True
    """Refine on both sides of a rate left undecided, so the interval's ends are the
    highest pass and the lowest fail (a confidence interval); False: an undecided rate
    ends the interval from above (a ranking's cheaper bisection)."""
    ranking: RankingProbes = Field(default_factory=lambda: RankingProbes())
    """How a sweep's search phase probes (:meth:`for_ranking`): enough to rank the
    configurations; the sweep's answer is measured by its confirmation with this
    search's own design."""

    @field_validator("relative_tolerance")
    @classmethod
    def _resolvable(cls, value: float) -> float:
        if value < MIN_RELATIVE_TOLERANCE:
            raise ValueError(
                f"relative_tolerance {value:g} is finer than probes can resolve: two rates "
                f"closer than {MIN_RELATIVE_TOLERANCE:.0%} differ by less than an engine's "
                f"own run-to-run noise; use at least {MIN_RELATIVE_TOLERANCE:g} (0.05 is a "
                "5 % interval)")
        return value

    @model_validator(mode="after")
    def _rates_in_order(self) -> CapacitySearch:
        if self.min_rate > self.max_rate:
            raise ValueError(f"min_rate ({self.min_rate:g}) must be <= max_rate "
                             f"({self.max_rate:g})")
        return self

    def for_ranking(self) -> CapacitySearch:
        """This search as a sweep's search phase runs it: :attr:`ranking`'s confidence,
        tolerance and probe size, an undecided rate the upper end — a reading that ranks,
        not an answer."""
        ranking = self.ranking
        return self.model_copy(update={
            "confidence": ranking.confidence, "extensions": ranking.extensions,
            "prompts_per_probe": ranking.prompts_per_probe or self.prompts_per_probe,
            "sample_confidence": None if ranking.prompts_per_probe else self.confidence,
            "resolve_undecided": False,
            "relative_tolerance": max(self.relative_tolerance,
                                      ranking.relative_tolerance)})

    def unable(self, percentile: float) -> str | None:
        """Why this search could never give a verdict on an SLO at ``percentile`` (a probe
        too small for a pass at its confidence), with what would; None when it can."""
        checks = [("capacity.prompts_per_probe", self.prompts_per_probe, self.confidence),
                  ("capacity.max_prompts_per_probe", self.max_prompts_per_probe,
                   self.confidence),
                  ("capacity.ranking.prompts_per_probe", self.ranking.prompts_per_probe,
                   self.ranking.confidence)]
        for name, requests, confidence in checks:
            needed = min_requests_to_pass(percentile, confidence)
            if requests is not None and requests < needed:
                lower = min_requests_to_pass(percentile, 0.9) if confidence > 0.9 else None
                return (f"{name} {requests} cannot give a verdict: at p{percentile:g} and "
                        f"{confidence:.0%} confidence a pass needs at least {needed} "
                        "requests, none over target; give at least "
                        f"{needed}" + (f", or a lower confidence (0.9 needs {lower})"
                                       if lower is not None else ""))
        return None
