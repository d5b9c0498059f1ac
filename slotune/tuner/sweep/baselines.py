"""One quality baseline per sweep: the lossless answers every lossy trial is checked against.

A lossy configuration (an fp8 checkpoint, an fp8 KV cache) scores only after its golden
answers agree with the lossless model's. Those reference answers are the same for every
lossy trial of a sweep, so the sweep measures them once — per model, GPU and baseline
configuration (:meth:`~slotune.tuner.spaces.SearchSpace.quality_baseline`) — as a trial of its
own (``TrialSpec.golden_reference``, a ``baseline`` row in the database), and hands them
to each lossy trial as its gate's ``reference``; a baseline that cannot boot or answer
hands on why (``reference_unavailable``), so no trial boots it again to find out. A
resumed sweep reads them back from its stored baseline rows.

:class:`QualityBaselines` keeps the book: which references are known, which baselines
are to start or running, and the lossy proposals parked until theirs is known. Launching
is the launch queue's (:mod:`slotune.tuner.sweep.launch_queue`), storing the runner's
(:mod:`slotune.tuner.sweep.coordinator`); nothing here touches the executor or the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from slotune.tuner.spaces import SearchSpace
from slotune.workers.contracts import TrialResult, TrialSpec

T = TypeVar("T")


def baseline_key(spec: TrialSpec) -> str:
    """What makes two baselines the same: model, GPU, engine flags and golden prompts."""
    return json.dumps({"model": spec.model, "gpu": spec.gpu, "flags": spec.engine_flags,
                       "golden": spec.golden_reference.model_dump(mode="json")
                       if spec.golden_reference is not None else None},
                      sort_keys=True, default=str)


@dataclass
class _Reference:
    answers: tuple[tuple[int, ...], ...] | None
    unavailable: str | None


@dataclass
class QualityBaselines(Generic[T]):
    """The sweep's baselines and the lossy proposals (``T``) waiting for them."""

    space: SearchSpace
    sweep_id: int
    max_parked: int = 1
    """Lossy proposals parked at once while their baseline runs (the sweep asks no more
    beyond this: a search must not run ahead of what it can measure)."""
    _known: dict[str, _Reference] = field(default_factory=dict)
    _to_start: dict[str, TrialSpec] = field(default_factory=dict)
    _running: set[str] = field(default_factory=set)
    _parked: list[tuple[str, T, TrialSpec]] = field(default_factory=list)
    _count: int = 0

    @property
    def parked(self) -> int:
        return len(self._parked)

    @property
    def next_number(self) -> int:
        """The ordinal of the next baseline row of the sweep."""
        return self._count

    def restore(self, rows: Iterable[tuple[TrialSpec, TrialResult]]) -> None:
        """What the sweep's stored baseline rows measured (a resumed sweep): answered
        ones are known; a failed one is run again (its failure may have been the node's)."""
        for spec, result in rows:
            self._count += 1
            if result.status == "ok" and result.golden_answers is not None:
                self._known[baseline_key(spec)] = _Reference(result.golden_answers, None)

    def ready(self, spec: TrialSpec) -> TrialSpec | None:
        """``spec`` with its reference (or why there is none) when the sweep knows it;
        ``spec`` itself when it needs none; None when its baseline is still to measure."""
        if spec.quality is None or not spec.quality.awaits_reference:
            return spec
        known = self._known.get(baseline_key(self._baseline_of(spec)))
        return None if known is None else _with(spec, known)

    def park(self, proposal: T, spec: TrialSpec) -> bool:
        """Hold a lossy proposal until its baseline is known, and make sure that baseline
        is to start; False (nothing held) when ``max_parked`` are waiting already."""
        if len(self._parked) >= self.max_parked:
            return False
        baseline = self._baseline_of(spec)
        key = baseline_key(baseline)
        if key not in self._running and key not in self._to_start:
            self._to_start[key] = baseline
        self._parked.append((key, proposal, spec))
        return True

    def to_start(self) -> list[TrialSpec]:
        """Baselines waiting for GPUs, oldest first."""
        return list(self._to_start.values())

    def started(self, baseline: TrialSpec) -> None:
        key = baseline_key(baseline)
        self._to_start.pop(key, None)
        self._running.add(key)
        self._count += 1

    def finished(self, baseline: TrialSpec, result: TrialResult) -> list[tuple[T, TrialSpec]]:
        """The baseline's outcome: the proposals it held, ready to launch (with the
        answers, or with why there are none)."""
        key = baseline_key(baseline)
        self._running.discard(key)
        if result.status == "ok" and result.golden_answers is not None:
            known = _Reference(result.golden_answers, None)
        else:
            known = _Reference(None, f"the sweep's lossless baseline (trial "
                                     f"{baseline.run_id}) failed ({result.failure}): "
                                     f"{result.failure_message or result.violated_rule}")
        self._known[key] = known
        released = [(proposal, _with(spec, known))
                    for k, proposal, spec in self._parked if k == key]
        self._parked = [item for item in self._parked if item[0] != key]
        return released

    def _baseline_of(self, spec: TrialSpec) -> TrialSpec:
        run_id = f"s{self.sweep_id}-baseline{self._count}-a1"
        return self.space.quality_baseline(spec, run_id)


def _with(spec: TrialSpec, known: _Reference) -> TrialSpec:
    assert spec.quality is not None
    return spec.model_copy(update={"quality": spec.quality.model_copy(update={
        "reference": known.answers, "reference_unavailable": known.unavailable})})
