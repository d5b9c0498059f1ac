"""`slotune sweep …` as users run it: subprocesses, real databases, a real kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from slotune.tuner.db.store import Store
from tests.support.lab import TP_SPACE
from tests.support.procscan import engine_pids

pytestmark = pytest.mark.slow

SLOTUNE = str(Path(sys.executable).with_name("slotune"))


def slotune(*args: str, timeout: float = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLOTUNE, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


LIGHT_LAB = """name: lab-2rps
dataset: {kind: random, input_len: 512, output_len: 128}
arrivals: {request_rate: 2}
num_prompts: 60
warmup_requests: 4
"""


def test_sweep_run_with_ray_and_the_simulated_engine(postgres_url: str,
                                                     postgres_store: Store, tmp_path: Path,
                                                     venv_script: Callable[[str], Path]) -> None:
    """The path end to end on Postgres: local Ray, simulated GPUs, engine processes, the
    best-config view, and Optuna's CLI reading the same database."""
    migrated_url, store = postgres_url, postgres_store
    # The lab space with lighter traffic (2 req/s), so every configuration has headroom
    # even when this 2-core machine is busy with other tests.
    workload = tmp_path / "lab-2rps.yaml"
    workload.write_text(LIGHT_LAB)
    result = slotune("sweep", "run", "--space", "lab", "--strategy", "tpe", "--trials", "2",
                     "--mode", "goodput", "--workload", str(workload), "--confirm-top", "2",
                     "--confirm-repeats", "2",
                     "--database-url", migrated_url, "--report-dir", str(tmp_path / "report"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vllm serve Qwen/Qwen2.5-7B-Instruct" in result.stdout
    assert "report:" in result.stdout
    [sweep] = store.list_sweeps().data
    assert sweep.status == "done"
    # Two configurations; a run this busy machine distorted is measured again (a row per
    # attempt), so each counts by its last attempt.
    last = {t.number: t for t in store.list_trials(sweep.id).data}
    assert len(last) == 2 and all(t.status == "ok" for t in last.values()), last
    [best] = store.best_for_workload(sweep.workload)
    assert best.confirmed and best.objective > 0
    studies = subprocess.run([str(venv_script("optuna")), "studies", "--storage",
                              migrated_url.replace("postgresql://", "postgresql+psycopg://")],
                             capture_output=True, text=True, timeout=120)
    assert sweep.optuna_study_name and sweep.optuna_study_name in studies.stdout, studies.stderr
    deadline = time.monotonic() + 15
    while engine_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine_pids() == []


def test_user_mistakes_get_one_line_and_exit_2(migrated_url: str, tmp_path: Path) -> None:
    vllm_space = tmp_path / "vllm-space.yaml"
    vllm_space.write_text(yaml.safe_dump({
        "name": "v", "engine": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "cpu",
        "knobs": {"max_num_seqs": {"type": "values", "values": [8, 64]}}}))
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n")
    unknown_model = tmp_path / "unknown-model.yaml"
    unknown_model.write_text(yaml.safe_dump({
        "name": "u", "model": "Foo/Bar-1B", "gpu": "rtx4090",
        "knobs": {"max_num_seqs": {"type": "values", "values": [8, 64]}}}))
    before = Store(migrated_url).list_sweeps().count
    for args, fragment in (
        (["sweep", "run", "--space", str(vllm_space), "--executor", "virtual",
          "--database-url", migrated_url], "--executor virtual runs the simulated engine only"),
        (["sweep", "run", "--space", "no-such-space", "--database-url", migrated_url],
         "unknown search space"),
        (["sweep", "run", "--strategy", "annealing", "--database-url", migrated_url],
         "unknown strategy"),
        (["sweep", "run", "--seed", "-1", "--database-url", migrated_url],
         "seed: Input should be greater than or equal to 0"),
        (["sweep", "run", "--deadline", "2020-01-01T07:00", "--database-url", migrated_url],
         "is in the past"),
        (["sweep", "run", "--space", str(unknown_model), "--database-url", migrated_url],
         "unknown model 'Foo/Bar-1B'"),
        (["sweep", "run", "--space", str(shadow), "--database-url", migrated_url],
         "not a field name"),
        (["sweep", "status", "999999", "--database-url", migrated_url], "999999"),
        (["sweep", "cancel", "999999", "--database-url", migrated_url], "999999"),
    ):
        result = slotune(*args, timeout=60)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert fragment in result.stderr
        assert "Traceback" not in result.stderr
        assert "hashhash" not in result.stderr  # a file that is no space is never echoed
    assert Store(migrated_url).list_sweeps().count == before  # refused before any row


def test_a_space_no_node_can_wholly_hold_is_warned_about_or_refused(
        migrated_url: str, tmp_path: Path) -> None:
    space = tmp_path / "tp.yaml"
    space.write_text(yaml.safe_dump(TP_SPACE))
    common = ["--space", str(space), "--strategy", "grid", "--trials", "6", "--confirm-top",
              "0", "--executor", "virtual", "--database-url", migrated_url]
    with Store(migrated_url) as store:  # (the module's database holds other tests' sweeps)
        before = store.list_sweeps().count
        queued_before = store.list_sweeps(status="queued").count
    strict = slotune("sweep", "run", *common, "--gpus", "2", "--strict")
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    assert "tensor_parallel_size=4: needs 4 GPUs" in strict.stderr
    assert "tensor_parallel_size=8: needs 8 GPUs" in strict.stderr
    with Store(migrated_url) as store:
        assert store.list_sweeps().count == before  # refused before any row

    warned = slotune("sweep", "run", *common, "--gpus", "2")
    assert warned.returncode == 0, warned.stderr
    warnings = [line for line in warned.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 2 and all("(--gpus 2) offers 2" in w for w in warnings)
    with Store(migrated_url) as store:
        sweep = store.list_sweeps().data[0]
        statuses = sorted(t.status for t in store.list_trials(sweep.id).data)
    assert statuses == ["infeasible"] * 4 + ["ok"] * 2

    # Without --gpus the virtual executor is as large as the space's largest trial.
    sized = slotune("sweep", "run", *common)
    assert sized.returncode == 0 and "warning" not in sized.stderr, sized.stderr
    with Store(migrated_url) as store:
        sweep = store.list_sweeps().data[0]
        rows = store.list_trials(sweep.id).data
    assert len(rows) == 6 and not [r for r in rows if "placed" in str(r.result)]
    # (every trial booted; TP 8 of a 28-head model is then refused by the engine itself)
    assert {r.params["tensor_parallel_size"] for r in rows if r.status == "ok"} >= {2, 4}

    # Queued for a coordinator elsewhere: checked against the declared largest node.
    env = {"SLOTUNE_MAX_NODE_GPUS": "4"}
    submit = ["sweep", "submit", "--space", str(space), "--database-url", migrated_url]
    queued = slotune(*submit, env=env)
    assert queued.returncode == 0 and queued.stdout.strip().isdigit(), queued.stderr
    assert "tensor_parallel_size=8: needs 8 GPUs on one node; the largest node " \
           "(SLOTUNE_MAX_NODE_GPUS) offers 4" in queued.stderr
    assert "tensor_parallel_size=4" not in queued.stderr
    refused = slotune(*submit, "--strict", env=env)
    assert refused.returncode == 2 and "tensor_parallel_size=8" in refused.stderr
    bad = slotune(*submit, env={"SLOTUNE_MAX_NODE_GPUS": "lots"})
    assert bad.returncode == 2 and "SLOTUNE_MAX_NODE_GPUS='lots'" in bad.stderr
    with Store(migrated_url) as store:
        assert store.list_sweeps(status="queued").count == queued_before + 1


def test_best_shows_only_what_met_the_slo_and_prints_one_line_per_configuration(
        migrated_url: str, tmp_path: Path) -> None:
    at_20 = tmp_path / "lab-20rps.yaml"  # the seed's own rate: no configuration holds it
    at_20.write_text(LIGHT_LAB.replace("lab-2rps", "lab-20rps")
                     .replace("request_rate: 2", "request_rate: 20"))
    common = ["--executor", "virtual", "--strategy", "random", "--trials", "3",
              "--mode", "goodput", "--confirm-top", "0", "--database-url", migrated_url]
    missed = slotune("sweep", "run", "--workload", str(at_20), *common)
    assert missed.returncode == 3, missed.stderr
    assert "no configuration meets the SLO at 20 req/s (" in missed.stdout
    light = tmp_path / "light.yaml"
    light.write_text(LIGHT_LAB)
    passed = slotune("sweep", "run", "--workload", str(light), *common)
    assert passed.returncode == 0, passed.stderr

    table = slotune("best", "--database-url", migrated_url)  # stdout is a pipe here
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    rows = [line for line in lines if "lab-2rps" in line and "Qwen/Qwen2.5-7B-Instruct" in line
            and "│" in line]
    assert len(rows) == 1, table.stdout
    assert "sim slotune-sim" in rows[0]  # engine and version, in the row, unwrapped
    assert not [line for line in lines if "lab-20rps" in line and "│" in line]  # no winner
    assert any(line.startswith("lab-20rps") and "no configuration meets the SLO" in line
               for line in lines)

    # (the module's database also holds other tests' sweeps: ask for this test's workload)
    tsv = slotune("best", "--output", "tsv", "--workload", "lab-2rps", "--database-url",
                  migrated_url).stdout.splitlines()
    header = tsv[0].split("\t")
    assert header[:4] == ["workload", "model", "gpu", "slo"] and header[-1] == "vllm_command"
    assert len(tsv) == 2, tsv
    only = dict(zip(header, tsv[1].split("\t"), strict=True))
    assert only["workload"] == "lab-2rps" and only["engine_version"] == "slotune-sim"
    assert only["measured_at"] and only["vllm_command"].startswith("vllm serve ")
    data = json.loads(slotune("best", "--output", "json", "--database-url",
                              migrated_url).stdout)
    workloads = [r["workload"] for r in data["data"]]
    assert "lab-2rps" in workloads and "lab-20rps" not in workloads
    assert "lab-20rps" in [m["workload"] for m in data["without_passing"]]
    bad = slotune("best", "--output", "xml", "--database-url", migrated_url)
    assert bad.returncode == 2 and "valid: table, tsv, json" in bad.stderr
