"""Kill an engine's whole process group when the trial process that started it dies.

Run as a script (``python -I -S _group_reaper.py PGID PARENT_PID``), standard library
only: importing the ``workers`` package would cost every trial a second of start-up.
:func:`slotune.workers.engines.process.start_group_reaper` starts it beside each engine.

The engine's parent-death signal (``PR_SET_PDEATHSIG``) reaches the engine's own process
only; the processes it started (vLLM's engine core, tensor-parallel workers) are its
children, not the trial's, and a SIGKILLed trial left them running, holding their GPUs.
This process watches its parent (the trial's process): once it is gone (this one was
handed to another parent), it SIGKILLs the engine's group. It exits by itself once the
group is gone, and the adapter stops it at teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

POLL_S = 0.2
"""How often the parent and the group are looked at: how late the group dies."""


def main(argv: list[str]) -> int:
    pgid, parent = int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the trial's to handle
    while True:
        if os.getppid() != parent:  # the trial's process died: its engine goes with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            return 0
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return 0  # the group is gone: nothing left to guard
        except PermissionError:
            pass
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
