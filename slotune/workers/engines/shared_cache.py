"""Engine caches shared by the trials of one node, and the lock that keeps their boots apart.

A compiled vLLM boot spends most of its start-up in ``torch.compile``; with the caches of
an earlier boot of the same configuration it skips most of that work. So an engine's
caches live in one directory per node instead of in each trial's temporary directory:

* **Where**: ``$SLOTUNE_ENGINE_CACHE_DIR`` on the worker (read where the engine runs),
  else ``<data dir>/engine-cache`` (:func:`slotune.workers.data_dir.default_data_dir`:
  ``$SLOTUNE_HOME``, else the XDG data dir). Each engine kind has its own folder in it
  (``vllm/``); what goes inside is the adapter's. The value ``off`` keeps the caches in
  each trial's own directory (no sharing, no lock).
* **A directory that cannot be used** (not creatable, not writable) is not a trial
  failure: the caches only save time, the trial measures the same without them, and no
  failure class fits a node's setting (``invalid_config`` would teach the sampler that a
  good configuration is bad; ``worker_lost`` would retry into the same wall). The trial
  compiles in its own directory, and says why in the first line of its engine log and in
  the worker's log (:class:`SharedCacheUnusable` names the path and the setting).
* **Boots that would write the same entries take turns**: :class:`BootLock` is an
  advisory ``flock`` on ``locks/<key>.lock`` in the engine's folder, held from before the
  engine starts until its compiled entries are written (vLLM: its engine core has
  initialised), it is healthy, or it has failed. The key is the adapter's fingerprint
  of what its compiled entries depend on, so two boots of one configuration (say a
  confirmation repeat) boot one after the other and the second finds the first's
  entries, while different configurations boot in parallel. The kernel drops a ``flock``
  when its holder dies, so a killed trial never leaves a stale lock. The wait is part of
  the trial's boot time and is bounded by its start-up timeout; past that, the trial
  boots with its own caches rather than wait on. A lock entry that is not a regular file
  (a directory, a FIFO, a symlink, which is never followed: the lock truncates its file)
  is :class:`BootLockUnusable`, and the trial boots with its own caches, as it does for
  an unusable folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from slotune.workers.data_dir import default_data_dir

__all__ = [
    "CACHE_OFF",
    "ENGINE_CACHE_ENV",
    "BootLock",
    "BootLockUnusable",
    "SharedCacheUnusable",
    "boot_key",
    "engine_cache_dir",
    "shared_cache_root",
]

ENGINE_CACHE_ENV = "SLOTUNE_ENGINE_CACHE_DIR"
CACHE_OFF = "off"
"""The setting's value that keeps every trial's caches in its own directory."""
LOCK_POLL_S = 0.25
"""How often a waiting boot retries the lock (the most a boot waits past its release)."""


class SharedCacheUnusable(Exception):
    """The shared cache directory cannot be created or written."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"the shared engine cache {path} cannot be used ({reason}); set "
            f"{ENGINE_CACHE_ENV} to a writable directory, or to '{CACHE_OFF}' to keep each "
            "trial's caches in its own directory")
        self.path = path


class BootLockUnusable(SharedCacheUnusable):
    """A boot's lock entry is there but is not a regular file the lock can use."""

    def __init__(self, path: Path, reason: str) -> None:
        Exception.__init__(
            self, f"the compile-cache lock {path} cannot be used ({reason}); remove it, or "
            f"set {ENGINE_CACHE_ENV} to another directory (or to '{CACHE_OFF}' to keep each "
            "trial's caches in its own directory)")
        self.path = path


def shared_cache_root() -> Path | None:
    """The node's shared engine-cache directory from the setting; None when it is ``off``."""
    raw = os.environ.get(ENGINE_CACHE_ENV, "").strip()
    if raw.lower() == CACHE_OFF:
        return None
    return Path(raw).expanduser() if raw else default_data_dir() / "engine-cache"


def engine_cache_dir(kind: str) -> Path | None:
    """The engine kind's folder in the shared directory, created and proven writable;
    None when the setting is ``off``. Raises :class:`SharedCacheUnusable`."""
    root = shared_cache_root()
    if root is None:
        return None
    folder = root / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "locks").mkdir(exist_ok=True)
        # Permissions alone do not say it (root ignores them; a read-only mount does not):
        # write a file.
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".writable-"):
            pass
    except OSError as exc:
        raise SharedCacheUnusable(folder, exc.strerror or str(exc)) from exc
    return folder


def boot_key(parts: Mapping[str, Any]) -> str:
    """A short, stable fingerprint of what a boot's compiled entries depend on."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class BootLock:
    """An exclusive advisory lock on one file (``flock``), taken without blocking the loop.

    ``flock`` locks belong to an open file, so two boots in one process exclude each other
    as two processes do; the kernel releases the lock when its holder's file is closed,
    which includes the holder dying.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    async def acquire(self, timeout_s: float, owner: str,
                      on_wait: Callable[[str], None] | None = None) -> bool:
        """Take the lock within ``timeout_s``; False (not held) when that passes first.

        ``owner`` is written into the lock file once held, so a boot that waits can say
        whom for (``on_wait`` gets that sentence once, when the first try fails).
        """
        if self._file is not None:
            raise RuntimeError(f"{self.path} is already held")
        handle = self._open()
        deadline = time.monotonic() + timeout_s
        told = False
        try:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                if not told and on_wait is not None:
                    on_wait(f"waiting for {self.holder() or 'another boot'}, booting the same "
                            f"configuration (lock {self.path})")
                    told = True
                if time.monotonic() >= deadline:
                    handle.close()
                    return False
                await asyncio.sleep(LOCK_POLL_S)
        except BaseException:  # cancelled while waiting: never leave the file open
            handle.close()
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{owner} (pid {os.getpid()})\n")
        handle.flush()
        self._file = handle
        return True

    def _open(self) -> IO[str]:
        """The lock file, created if missing; :class:`BootLockUnusable` for an entry that
        is not a regular file. Never through a symlink (the holder truncates the file),
        and without blocking on a FIFO."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            reason = ("a symlink, which is not followed" if self.path.is_symlink()
                      else exc.strerror or str(exc))
            raise BootLockUnusable(self.path, reason) from exc
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise BootLockUnusable(self.path, kind)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "r+")

    def holder(self) -> str:
        """Who holds (or last held) the lock, as its holder wrote it; "" if unknown."""
        with contextlib.suppress(OSError):
            return self.path.read_text().strip()
        return ""

    def release(self) -> None:
        """Let the next boot go. Idempotent."""
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()  # closing the file drops the flock
