"""Conversations (``multi_turn``): when sessions start, what each turn sends, what they earned.

A session's turns are dependent requests: turn ``k`` leaves ``think_time_s`` after turn
``k − 1``'s answer, and its prompt is the conversation so far — every earlier prompt and
answer — plus its own new message. This module holds that state and its accounting; the
runner (live) and the virtual backend (simulated) drive the sessions.

How the conversation is sent, so a server's prefix cache sees exactly the tokens it
already holds:

* chat endpoint: the earlier turns as ``user`` / ``assistant`` messages (the server's
  chat template renders them, as vLLM's multi-turn benchmark sends them);
* completions endpoint, prompts as token ids: the earlier prompt ids followed by the
  answer's own token ids, which the request asks for (vLLM's ``return_token_ids``); a
  server that does not send them has the rest of the session sent as text;
* completions endpoint, prompts as text: the earlier text and the answer's text.

**The two kinds of prefix-cache hit.** A turn's ``context_tokens`` (its earlier prompt and
answer) are tokens its own session re-sends: hits on them are the workload's, not
contamination. The server counts hits without saying whose, so they are attributed: up
to the tokens the sessions re-sent are in-session hits (a cache cannot serve more of a
session's context than it re-sent, block rounding aside), the rest are other hits — a
shared system prompt, or an earlier run's prompts. ``in_session_hit_rate`` is in-session
hits over the context tokens re-sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from slotune.workers.contracts import Arrivals, MultiTurnDataset
from slotune.workers.loadgen.generate.arrivals import arrival_offsets

if TYPE_CHECKING:  # annotations only
    from slotune.workers.loadgen.client import RequestRecord

__all__ = ["Conversation", "group_sessions", "session_offsets", "session_summary",
           "steady_arrivals_s"]


class Turn(Protocol):
    """A sampled request that may be a turn of a session (live or virtual)."""

    @property
    def session(self) -> int | None: ...


def group_sessions(specs: Sequence[Turn]) -> list[list[int]]:
    """Indices of ``specs`` per session, in order (sessions are contiguous runs)."""
    groups: list[list[int]] = []
    current: int | None = None
    for i, spec in enumerate(specs):
        if spec.session is None or spec.session != current or not groups:
            groups.append([])
            current = spec.session
        groups[-1].append(i)
    return groups


def session_arrivals(arrivals: Arrivals, mean_turns: float) -> Arrivals:
    """The workload's process for sessions: every rate divided by the turns per session,
    so that requests arrive at the workload's rate. (Copied without validation: a ramp's
    start may fall under the 1 req/s a request ramp is held to.)"""
    ramp = arrivals.ramp_up
    if ramp is not None:
        ramp = ramp.model_copy(update={"start_rps": ramp.start_rps / mean_turns,
                                       "end_rps": ramp.end_rps / mean_turns})
    return arrivals.model_copy(update={"request_rate": arrivals.request_rate / mean_turns,
                                       "ramp_up": ramp})


def steady_arrivals_s(dataset: MultiTurnDataset, ttft_s: float, tpot_s: float,
                      spans: float) -> float:
    """How long sessions must keep arriving for the server to spend most of the run in
    the steady state: ``spans`` session lifetimes (the first is a ramp of sessions on
    their first turns), a lifetime at its longest under the SLO (every turn at the TTFT
    and TPOT targets, plus think times).

    A conversation is closed-loop: its turns wait for answers, so a short run at a high
    rate is mostly sessions' first turns — a rate it never sustains."""
    turns = dataset.mean_turns
    answer_s = ttft_s + max(dataset.output_len - 1, 0) * tpot_s
    return spans * ((turns - 1) * dataset.think_time_s + turns * answer_s)


def session_offsets(specs: Sequence[Turn], dataset: MultiTurnDataset,
                    arrivals: Arrivals, seed: int) -> list[float]:
    """When each session's first turn starts (engine seconds), one per session."""
    groups = group_sessions(specs)
    mean_turns = len(specs) / len(groups) if groups else dataset.mean_turns
    return arrival_offsets(len(groups), session_arrivals(arrivals, mean_turns), seed)


@dataclass(slots=True)
class Conversation:
    """One session's state between turns: what it has sent and been answered."""

    ids: list[int] | None = field(default_factory=list)
    """The conversation as token ids (completions with ids), None once it went to text."""
    text: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    context_tokens: int = 0
    """Tokens of the conversation so far (the last prompt and its answer, as counted)."""

    def prompt(self, message: str | list[int], chat: bool) -> str | list[int]:
        """This turn's prompt: the conversation so far and ``message`` (for chat, the
        message alone: the history travels as messages)."""
        if chat:
            assert isinstance(message, str)
            return message
        if isinstance(message, list) and self.ids is not None:
            return [*self.ids, *message]
        text = message if isinstance(message, str) else None
        if text is None:  # ids, but the conversation already went to text
            raise ValueError("a conversation sent as text continues as text")
        return f"{self.text} {text}" if self.text else text

    def answered(self, sent: str | list[int], message_text: str,
                 record: RequestRecord) -> None:
        """Append the turn just answered: its prompt and the model's answer."""
        answer = record.text or ""
        self.messages += [{"role": "user", "content": message_text},
                          {"role": "assistant", "content": answer.strip()}]
        if isinstance(sent, list) and record.output_ids is not None:
            self.ids = [*sent, *record.output_ids]
        else:
            self.ids = None
        # the whole conversation as text too (what a text prompt sends), should the
        # server stop returning token ids
        self.text = f"{self.text} {message_text}{answer}" if self.text \
            else f"{message_text}{answer}"
        self.context_tokens = record.prompt_len + (record.output_tokens or 0)


def session_summary(records: Sequence[RequestRecord],
                    prefix_cache_hits: float | None) -> dict[str, Any] | None:
    """Per-turn latency, the sessions' own latency and the two kinds of cache hit; None
    when no record belongs to a session."""
    turns = [r for r in records if r.session is not None and r.turn is not None]
    if not turns:
        return None
    by_turn: dict[int, list[RequestRecord]] = {}
    by_session: dict[int, list[RequestRecord]] = {}
    for r in turns:
        by_turn.setdefault(int(r.turn), []).append(r)  # type: ignore[arg-type]
        by_session.setdefault(int(r.session), []).append(r)  # type: ignore[arg-type]
    per_turn = []
    for turn in sorted(by_turn):
        group = by_turn[turn]
        ok = [r for r in group if r.success and r.timings.chunks]
        ttfts = [(r.timings.chunks[0] - r.timings.start) * 1000 for r in ok]
        per_turn.append({
            "turn": turn, "requests": len(group), "completed": len(ok),
            "mean_prompt_tokens": float(np.mean([r.prompt_len for r in ok])) if ok else None,
            "mean_context_tokens": float(np.mean([r.context_tokens for r in ok])) if ok else None,
            "mean_ttft_ms": float(np.mean(ttfts)) if ttfts else None,
            "median_ttft_ms": float(np.median(ttfts)) if ttfts else None,
            "p99_ttft_ms": float(np.percentile(ttfts, 99)) if ttfts else None,
        })
    latencies = []
    for group in by_session.values():
        if all(r.success and r.timings.end is not None for r in group):
            latencies.append(max(r.timings.end or 0.0 for r in group)
                             - min(r.timings.start for r in group))
    context = float(sum(r.context_tokens for r in turns if r.success))
    summary: dict[str, Any] = {
        "sessions": len(by_session),
        "completed_sessions": len(latencies),
        "per_turn": per_turn,
        "mean_session_latency_s": float(np.mean(latencies)) if latencies else None,
        "p99_session_latency_s": float(np.percentile(latencies, 99)) if latencies else None,
        "context_tokens": context,
        "prefix_cache_hit_tokens": prefix_cache_hits,
        "in_session_hit_tokens": None,
        "other_hit_tokens": None,
        "in_session_hit_rate": None,
    }
    if prefix_cache_hits is not None:
        in_session = min(prefix_cache_hits, context)
        summary.update(in_session_hit_tokens=in_session,
                       other_hit_tokens=prefix_cache_hits - in_session,
                       in_session_hit_rate=in_session / context if context else None)
    return summary
