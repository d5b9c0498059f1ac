"""Conversations for the multi-turn tests: a sampled dataset, and a ShareGPT file of real
ones."""

from __future__ import annotations

import json
from pathlib import Path

from slotune.workers.contracts import MultiTurnDataset

__all__ = ["CONVERSATIONS", "sharegpt_file"]

CONVERSATIONS = MultiTurnDataset(min_turns=3, max_turns=5, system_prompt_len=48,
                                 input_len=64, output_len=24, think_time_s=0.4,
                                 think_time="constant")


def sharegpt_file(folder: Path) -> Path:
    """Six conversations of 1–4 exchanges (ShareGPT's format), words the simulator counts."""
    convs = []
    for c in range(6):
        turns = []
        for t in range(1 + c % 4):
            turns += [{"from": "human", "value": " ".join(f"q{c}x{t}w{i}" for i in range(30))},
                      {"from": "gpt", "value": " ".join(["a"] * (10 + t))}]
        convs.append({"id": f"c{c}", "conversations": turns})
    path = folder / "talks.json"
    path.write_text(json.dumps(convs))
    return path
