"""The engines' shared caches on a node: where the vLLM adapter points them, what it does
when it cannot, and the lock that makes boots of one configuration take turns.

The lock tests use real ``flock`` between real processes (the way two Ray workers of one
node meet); the adapter tests boot the vLLM adapter against the simulated engine's
vLLM-compatible entry where a process is needed. The real vLLM, compiling into a shared
cache, is ``test_shared_cache_real_vllm.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slotune.workers.engines import EngineFailure, make_engine
from slotune.workers.engines.shared_cache import (
    ENGINE_CACHE_ENV,
    BootLock,
    SharedCacheUnusable,
    engine_cache_dir,
)
from slotune.workers.engines.vllm import VllmEngine
from tests.support.engines import make_spec
from tests.support.paths import REPO

CACHE_VARS = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
              "VLLM_XLA_CACHE_PATH")


@pytest.fixture(autouse=True)
def _no_operator_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CACHE_VARS:
        monkeypatch.delenv(name, raising=False)


def vllm_engine(workdir: Path, **overrides: object) -> VllmEngine:
    engine = make_engine(make_spec("vllm", **overrides), workdir)
    assert isinstance(engine, VllmEngine)
    return engine


# ---- where the caches live ----------------------------------------------------------------

def test_by_default_the_caches_are_shared_under_the_data_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_CACHE_ENV)
    monkeypatch.setenv("SLOTUNE_HOME", str(tmp_path / "home"))
    env = vllm_engine(tmp_path / "trial-1").environment()
    shared = tmp_path / "home" / "engine-cache" / "vllm"
    assert env["VLLM_CACHE_ROOT"] == str(shared / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(shared / "torchinductor")
    assert env["TRITON_CACHE_DIR"] == str(shared / "triton")
    # vLLM's own default for it is beside its cache root, not under it.
    assert env["VLLM_XLA_CACHE_PATH"] == str(shared / "vllm" / "xla_cache")
    assert shared.is_dir()
    # Another trial of the node gets the same folders.
    assert vllm_engine(tmp_path / "trial-2").environment()["VLLM_CACHE_ROOT"] == \
        env["VLLM_CACHE_ROOT"]

    monkeypatch.delenv("SLOTUNE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert vllm_engine(tmp_path / "trial-3").environment()["VLLM_CACHE_ROOT"] == \
        str(tmp_path / "xdg" / "slotune" / "engine-cache" / "vllm" / "vllm")


def test_the_setting_names_the_folder_and_off_keeps_each_trials_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_CACHE_ENV, str(tmp_path / "node-cache"))
    env = vllm_engine(tmp_path / "trial").environment()
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "node-cache" / "vllm" / "torchinductor")

    monkeypatch.setenv(ENGINE_CACHE_ENV, "OFF")
    workdir = tmp_path / "own"
    env = vllm_engine(workdir).environment()
    for name in CACHE_VARS:
        assert env[name].startswith(str(workdir) + os.sep), (name, env[name])


def test_the_operators_own_cache_variables_win(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/srv/vllm-cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/srv/triton")
    env = vllm_engine(tmp_path / "trial").environment()
    assert env["VLLM_CACHE_ROOT"] == "/srv/vllm-cache"
    assert env["TRITON_CACHE_DIR"] == "/srv/triton"
    assert env["VLLM_XLA_CACHE_PATH"] == "/srv/vllm-cache/xla_cache"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == \
        str(Path(os.environ[ENGINE_CACHE_ENV]) / "vllm" / "torchinductor")


def test_an_unusable_folder_is_named_and_the_trial_compiles_in_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(ENGINE_CACHE_ENV, str(blocker / "cache"))
    with pytest.raises(SharedCacheUnusable) as info:
        engine_cache_dir("vllm")
    message = str(info.value)
    assert str(blocker / "cache" / "vllm") in message and ENGINE_CACHE_ENV in message
    assert "'off'" in message

    # The trial itself is not failed for it: the engine boots (here it refuses its
    # configuration, which ends the boot fast) with its own caches, and the first line
    # of its log says why.
    monkeypatch.setenv("SLOTUNE_SIM_GPU", "rtx4090")
    workdir = tmp_path / "trial"
    engine = vllm_engine(workdir, knobs={"max_num_seqs": 512, "max_num_batched_tokens": 256})
    with caplog.at_level(logging.WARNING), engine, pytest.raises(EngineFailure) as failed:
        asyncio.run(engine.boot(30))
    assert failed.value.failure == "invalid_config"
    assert engine._env["VLLM_CACHE_ROOT"] == str(workdir / "vllm-cache")
    first_line = engine.log_text().splitlines()[0]
    assert first_line.startswith("[slotune] compile caches: ")
    assert message in first_line and "its own directory" in first_line
    assert message in caplog.text


# ---- which boots take turns ------------------------------------------------------------------

def test_boots_that_vllm_compiles_alike_share_a_key_and_others_do_not(tmp_path: Path) -> None:
    base = {"max_num_seqs": 64, "max_num_batched_tokens": 2048}

    def key(**knobs: object) -> str:
        return vllm_engine(tmp_path, knobs={**base, **knobs}).compile_key()

    assert key() == vllm_engine(tmp_path, knobs=base, run_id="other").compile_key()
    # Arguments vLLM 0.32 leaves out of its compile hash leave the key alone...
    assert key(gpu_memory_utilization=0.5, enable_prefix_caching=True, seed=3) == key()
    # ...those it hashes move it.
    assert key(max_num_batched_tokens=4096) != key()
    assert key(max_num_seqs=128) != key()
    assert key(compilation_config={"mode": 3}) != key()
    assert vllm_engine(tmp_path, model="other/model", knobs=base).compile_key() != key()


@pytest.fixture
def node_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENGINE_CACHE_ENV, str(tmp_path / "node-cache"))
    return tmp_path / "node-cache" / "vllm"


async def _enter_slot(engine: VllmEngine, timeout_s: float, hold_s: float,
                      spans: list[tuple[float, float]]) -> None:
    async with engine.boot_slot(timeout_s):
        began = time.monotonic()
        await asyncio.sleep(hold_s)
        spans.append((began, time.monotonic()))


def test_one_configuration_boots_one_at_a_time_and_others_in_parallel(
        tmp_path: Path, node_cache: Path) -> None:
    first = vllm_engine(tmp_path / "a", run_id="trial-a")
    repeat = vllm_engine(tmp_path / "b", run_id="trial-b")
    other = vllm_engine(tmp_path / "c", run_id="trial-c", knobs={"max_num_seqs": 8})
    spans: dict[str, list[tuple[float, float]]] = {"a": [], "b": [], "c": []}

    async def main() -> None:
        await asyncio.gather(_enter_slot(first, 30, 0.6, spans["a"]),
                             _enter_slot(repeat, 30, 0.6, spans["b"]),
                             _enter_slot(other, 30, 0.6, spans["c"]))

    asyncio.run(main())
    (a0, a1), (b0, b1), (c0, _) = spans["a"][0], spans["b"][0], spans["c"][0]
    assert b0 >= a1 or a0 >= b1, "the repeat booted while the first was booting"
    assert c0 < min(a1, b1), "a different configuration waited for another's turn"
    waiter, holder = (repeat, first) if b0 >= a1 else (first, repeat)
    assert any("waiting for trial trial-" in note for note in waiter.notes), waiter.notes
    assert any(note.startswith("waited ") for note in waiter.notes), waiter.notes
    # The wait is a boot phase of its own, not the server's start-up.
    assert waiter.turn_wait_s >= 0.5 and holder.turn_wait_s < 0.5 and other.turn_wait_s < 0.5


def test_the_next_boot_goes_once_the_engine_core_has_compiled_not_when_the_server_is_up(
        tmp_path: Path, node_cache: Path) -> None:
    first = vllm_engine(tmp_path / "a", run_id="trial-a")
    repeat = vllm_engine(tmp_path / "b", run_id="trial-b")
    entered: list[str] = []

    async def first_boot() -> None:
        async with first.boot_slot(30):
            entered.append("first")
            await asyncio.sleep(0.5)
            first.log_path.parent.mkdir(parents=True, exist_ok=True)
            first.log_path.write_text(  # vLLM 0.32's line, once its compiled entries exist
                "(EngineCore pid=1) INFO 12-03 08:26:26 [core.py:402] init engine (profile, "
                "create kv cache, warmup model) took 33.71 s\n")
            await asyncio.sleep(3.0)  # its API server is still starting
            entered.append("first is up")

    async def repeat_boot() -> None:
        await asyncio.sleep(0.1)
        async with repeat.boot_slot(30):
            entered.append("repeat")

    async def main() -> None:
        await asyncio.gather(first_boot(), repeat_boot())

    asyncio.run(main())
    assert entered == ["first", "repeat", "first is up"]
    assert 0.4 < repeat.turn_wait_s < 2.5


def test_an_eager_boot_compiles_nothing_and_takes_no_turn(tmp_path: Path,
                                                          node_cache: Path) -> None:
    eager = vllm_engine(tmp_path / "a", knobs={"max_num_seqs": 64, "enforce_eager": True})
    lock = BootLock(node_cache / "locks" / f"{eager.compile_key()}.lock")
    node_cache.joinpath("locks").mkdir(parents=True)

    async def main() -> float:
        assert await lock.acquire(1, owner="someone else")
        began = time.monotonic()
        async with eager.boot_slot(30):
            return time.monotonic() - began

    assert asyncio.run(main()) < 0.1
    lock.release()


def test_a_turn_that_never_comes_boots_with_the_trials_own_caches(tmp_path: Path,
                                                                  node_cache: Path) -> None:
    workdir = tmp_path / "trial"
    engine = vllm_engine(workdir)
    node_cache.joinpath("locks").mkdir(parents=True)
    lock = BootLock(node_cache / "locks" / f"{engine.compile_key()}.lock")

    async def main() -> float:
        assert await lock.acquire(1, owner="trial stuck-1")
        began = time.monotonic()
        async with engine.boot_slot(0.5):
            waited = time.monotonic() - began
            assert engine.environment()["VLLM_CACHE_ROOT"] == str(workdir / "vllm-cache")
        return waited

    waited = asyncio.run(main())
    lock.release()
    assert 0.5 <= waited < 2
    assert any("still held after 0.5 s (by trial stuck-1" in note for note in engine.notes)
    assert 0.5 <= engine.turn_wait_s <= waited  # the wait is the boot's, not the server's


@pytest.mark.parametrize("entry", ["directory", "fifo", "symlink"])
def test_a_lock_entry_that_is_not_a_file_boots_with_the_trials_own_caches(
        entry: str, tmp_path: Path, node_cache: Path) -> None:
    """Issue 38: a directory (or a FIFO) where a boot's lock file goes crashed the trial
    (IsADirectoryError); as for an unusable folder, it boots with its own caches and says
    why. A symlink there is not followed (its target would be truncated)."""
    workdir = tmp_path / "trial"
    engine = vllm_engine(workdir)
    locks = node_cache / "locks"
    locks.mkdir(parents=True)
    path = locks / f"{engine.compile_key()}.lock"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    {"directory": path.mkdir, "fifo": lambda: os.mkfifo(path),
     "symlink": lambda: path.symlink_to(victim)}[entry]()

    async def main() -> None:
        async with engine.boot_slot(5):
            assert engine.environment()["VLLM_CACHE_ROOT"] == str(workdir / "vllm-cache")

    asyncio.run(main())
    note = next(n for n in engine.notes if n.startswith("compile caches: "))
    assert str(path) in note and "its own directory" in note
    assert victim.read_text() == "keep me"


# ---- the lock between processes ---------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import asyncio, pathlib, sys, time
    from slotune.workers.engines.shared_cache import BootLock
    lock_path, go, hold_s = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), float(sys.argv[3])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.01)
    lock = BootLock(lock_path)
    assert asyncio.run(lock.acquire(30, owner="holder"))
    began = time.time()
    print("acquired", flush=True)
    time.sleep(hold_s)
    print(f"span {began} {time.time()}", flush=True)
    lock.release()
""")


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _start_holders(tmp_path: Path, procs: list[subprocess.Popen[str]],
                   lock_names: list[str], hold_s: float) -> None:
    go = tmp_path / "go"
    for name in lock_names:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / name), str(go),
                                 str(hold_s)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        procs.append(proc)
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    go.touch()  # both try at the same moment


def _spans(procs: list[subprocess.Popen[str]]) -> list[tuple[float, float]]:
    spans = []
    for proc in procs:
        out, _ = proc.communicate(timeout=30)
        line = next(line for line in out.splitlines() if line.startswith("span "))
        _, began, ended = line.split()
        spans.append((float(began), float(ended)))
    return spans


def test_processes_holding_one_key_take_turns(tmp_path: Path,
                                              holders: list[subprocess.Popen[str]]) -> None:
    _start_holders(tmp_path, holders, ["same.lock", "same.lock"], hold_s=0.5)
    (_, first_released), (second_took, _) = sorted(_spans(holders))
    assert second_took >= first_released


def test_processes_holding_different_keys_run_together(
        tmp_path: Path, holders: list[subprocess.Popen[str]]) -> None:
    _start_holders(tmp_path, holders, ["one.lock", "two.lock"], hold_s=1.0)
    (_, first_released), (second_took, _) = sorted(_spans(holders))
    assert second_took < first_released


def test_a_killed_holder_frees_its_key_at_once(tmp_path: Path,
                                               holders: list[subprocess.Popen[str]]) -> None:
    _start_holders(tmp_path, holders, ["same.lock"], hold_s=60)
    holder = holders[0]
    assert holder.stdout is not None and holder.stdout.readline() == "acquired\n"
    lock = BootLock(tmp_path / "same.lock")
    told: list[str] = []
    assert not asyncio.run(lock.acquire(0.3, owner="me", on_wait=told.append))
    assert told and "waiting for holder (pid" in told[0]

    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    began = time.monotonic()
    assert asyncio.run(lock.acquire(5, owner="me"))
    assert time.monotonic() - began < 1
    lock.release()
