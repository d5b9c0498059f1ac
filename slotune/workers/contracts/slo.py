"""What "fast enough" means: the :class:`SLO`'s percentile targets and error budget."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from slotune.workers.contracts._base import _Strict

SLOMetric = Literal["ttft", "tpot", "itl", "e2el"]
SLO_METRICS: tuple[SLOMetric, ...] = ("ttft", "tpot", "itl", "e2el")


# --- SLO -----------------------------------------------------------------------------------


class SLO(_Strict):
    """Latency targets (ms) at a percentile: ``SLO(percentile=99, ttft=300, tpot=50)``."""

    percentile: float = Field(99.0, gt=0, le=100)
    ttft: float | None = Field(None, gt=0)
    tpot: float | None = Field(None, gt=0)
    itl: float | None = Field(None, gt=0)
    e2el: float | None = Field(None, gt=0)

    @property
    def targets(self) -> dict[SLOMetric, float]:
        """Targeted metrics and their limits in ms, in the canonical metric order."""
        out: dict[SLOMetric, float] = {}
        for metric in SLO_METRICS:
            value = getattr(self, metric)
            if value is not None:
                out[metric] = float(value)
        return out

    @classmethod
    def parse(cls, text: str | list[str], percentile: float = 99.0) -> SLO:
        """Parse ``"ttft:300,tpot:50"`` (or vLLM's ``--goodput ttft:300 tpot:50`` list).

        ``p:95`` (or ``percentile:95``) sets the percentile. Raises ``ValueError`` with
        the offending item and the valid names.
        """
        items = text if isinstance(text, list) else [text]
        pieces = [p.strip() for item in items for p in item.split(",") if p.strip()]
        values: dict[str, float] = {"percentile": percentile}
        for piece in pieces:
            key, sep, raw = piece.partition(":")
            key = key.strip().lower()
            if not sep:
                raise ValueError(f"SLO item {piece!r} is not 'metric:milliseconds' (e.g. ttft:300)")
            if key in {"p", "percentile"}:
                key = "percentile"
            elif key not in SLO_METRICS:
                valid = ", ".join(SLO_METRICS)
                raise ValueError(f"unknown SLO metric {key!r} in {piece!r}; valid: {valid}")
            try:
                values[key] = float(raw)
            except ValueError:
                raise ValueError(f"SLO item {piece!r}: {raw!r} is not a number") from None
        return cls.model_validate(values)

    def __str__(self) -> str:
        targets = ", ".join(f"{k} ≤ {v:g} ms" for k, v in self.targets.items())
        return f"p{self.percentile:g} {targets}" if targets else "no SLO targets"
