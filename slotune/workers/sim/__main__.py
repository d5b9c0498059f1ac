"""``python -m slotune.workers.sim serve MODEL [vLLM flags]`` — a drop-in for the ``vllm``
binary."""

from __future__ import annotations

import sys

from slotune.workers.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
