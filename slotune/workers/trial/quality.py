"""The quality gate: does a lossy configuration still say what the lossless one says?

Weight quantisation, an fp8 KV cache and inexact speculative decoding change the numbers
a model computes, so they may change what it answers. A lossy configuration scores only
after one of two checks passes (the trial's :class:`~slotune.workers.contracts.QualityGate`):

* **golden requests** — the gate's prompts, greedy decoding, the first ``max_tokens``
  tokens of each answer compared position by position with the lossless baseline's
  (:func:`agreement`). Answers are taken as text and tokenized by the engine's own
  ``/tokenize``, so the comparison is in the model's tokens on any OpenAI-compatible
  server;
* **a user command** — an argv list (never a shell string) run against the booted
  engine; the last number it prints is its score (:func:`run_command`).

:func:`verdict_constraint` is what the sampler is told: ≤ 0 when the check passed.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
from collections.abc import Sequence

import httpx

from slotune.workers.contracts import CommandCheck, GoldenCheck, QualityGate, QualityVerdict

__all__ = [
    "QUALITY",
    "QualityUnavailable",
    "agreement",
    "command_verdict",
    "golden_outputs",
    "golden_verdict",
    "run_command",
    "verdict_constraint",
]

QUALITY = "quality"
"""The constraint key of the gate (≤ 0: passed)."""
_END = -1
"""Stands for "the answer had ended" in a comparison: two answers that stop at the same
place agree there, an answer that stops early disagrees with one that goes on."""
_CONCURRENCY = 8
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class QualityUnavailable(Exception):
    """The check could not run (the baseline did not boot, the command failed, …)."""


def agreement(reference: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]],
              max_tokens: int) -> float:
    """The share of the first ``max_tokens`` positions, over every prompt, where the
    candidate's token equals the reference's (an ended answer counts as an end marker)."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError(f"need one candidate answer per reference answer, got "
                         f"{len(candidate)} for {len(reference)}")
    equal = 0
    for ref, cand in zip(reference, candidate, strict=True):
        for i in range(max_tokens):
            a = ref[i] if i < len(ref) else _END
            b = cand[i] if i < len(cand) else _END
            equal += a == b
    return equal / (max_tokens * len(reference))


async def golden_outputs(base_url: str, model: str, check: GoldenCheck,
                         *, timeout_s: float = 300.0) -> tuple[tuple[int, ...], ...]:
    """Each golden prompt's greedy answer, in the model's token ids (at most
    ``max_tokens``). Raises :class:`QualityUnavailable` when the engine does not answer."""
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def one(client: httpx.AsyncClient, prompt: str) -> tuple[int, ...]:
        async with limit:
            answer = await client.post(f"{base_url}/v1/completions", json={
                "model": model, "prompt": prompt, "max_tokens": check.max_tokens,
                "temperature": 0.0, "seed": 0, "stream": False})
            text = _answer_text(answer)
            if not text:
                return ()
            tokens = await client.post(f"{base_url}/tokenize", json={
                "model": model, "prompt": text, "add_special_tokens": False})
            return _token_ids(tokens)[:check.max_tokens]

    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            return tuple(await asyncio.gather(*(one(client, p) for p in check.prompts)))
    except httpx.HTTPError as exc:
        raise QualityUnavailable(f"golden requests to {base_url} failed: "
                                 f"{type(exc).__name__}: {exc}") from None


def _answer_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        if response.status_code != 200:
            raise QualityUnavailable(f"a golden request was refused ({response.status_code}): "
                                     f"{str(body)[:200]}")
        return str(body["choices"][0]["text"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise QualityUnavailable(f"a golden request's answer is not a completion "
                                 f"({response.status_code}): {response.text[:200]}") from None


def _token_ids(response: httpx.Response) -> tuple[int, ...]:
    try:
        body = response.json()
        return tuple(int(t) for t in body["tokens"])
    except (ValueError, KeyError, TypeError):
        raise QualityUnavailable(f"/tokenize did not return token ids "
                                 f"({response.status_code}): {response.text[:200]}") from None


def golden_verdict(gate: QualityGate, reference: Sequence[Sequence[int]],
                   candidate: Sequence[Sequence[int]], seconds: float) -> QualityVerdict:
    """The verdict of the golden check from both sets of answers."""
    check = gate.golden
    assert check is not None
    share = agreement(reference, candidate, check.max_tokens)
    passed = share >= check.min_agreement
    return QualityVerdict(
        checked=True, method="golden", lossy=gate.lossy, agreement=share,
        threshold=check.min_agreement, passed=passed, seconds=seconds,
        answers=tuple(tuple(answer) for answer in candidate),
        detail=(f"{share:.1%} of the first {check.max_tokens} tokens of "
                f"{len(check.prompts)} golden answers agree with the lossless baseline "
                f"({', '.join(f'{k}={v}' for k, v in gate.baseline.items())}); "
                f"{'at least' if passed else 'below'} {check.min_agreement:.0%} required"))


async def run_command(check: CommandCheck, base_url: str, model: str) -> float:
    """Run the quality command against the engine; its score (the last number on its
    stdout). Raises :class:`QualityUnavailable` when it fails or prints no number."""
    argv = [a.replace("{base_url}", base_url).replace("{model}", model) for a in check.argv]
    env = {**os.environ, "SLOTUNE_BASE_URL": base_url, "SLOTUNE_MODEL": model}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
    except OSError as exc:
        raise QualityUnavailable(f"quality command {argv[0]!r} could not start: "
                                 f"{exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), check.timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise QualityUnavailable(f"quality command {argv[0]!r} ran past "
                                 f"{check.timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise QualityUnavailable(f"quality command {argv[0]!r} exited {proc.returncode}: "
                                 f"{tail[0][:300]}")
    numbers = [float(n) for n in _NUMBER.findall(out.decode(errors="replace"))]
    finite = [n for n in numbers if math.isfinite(n)]
    if not finite:
        raise QualityUnavailable(f"quality command {argv[0]!r} printed no score (a number "
                                 "on stdout, the last one counts)")
    return finite[-1]


def command_verdict(gate: QualityGate, score: float, seconds: float) -> QualityVerdict:
    check = gate.command
    assert check is not None
    passed = score >= check.min_score
    return QualityVerdict(
        checked=True, method="command", lossy=gate.lossy, score=score,
        threshold=check.min_score, passed=passed, seconds=seconds,
        detail=f"quality command scored {score:g}; {'at least' if passed else 'below'} "
               f"{check.min_score:g} required")


def verdict_constraint(verdict: QualityVerdict) -> float:
    """The ``quality`` constraint told to the sampler: how far below its threshold the
    check ended, relative to the threshold (≤ 0 passed; 1 when it could not run)."""
    value = verdict.agreement if verdict.agreement is not None else verdict.score
    if verdict.passed is None:
        return 0.0  # allowed unchecked: nothing to learn
    if value is None or verdict.threshold is None:
        return 1.0
    scale = abs(verdict.threshold) or 1.0
    return (verdict.threshold - value) / scale
