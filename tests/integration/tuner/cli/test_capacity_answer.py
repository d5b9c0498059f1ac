"""The main job's answer, and capacity per GPU deciding it: sweeps as a user runs them
(``slotune sweep run``, the virtual executor), read back from the terminal, the view
and the report."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from html import escape
from pathlib import Path
from typing import Any

import pytest
import yaml

from slotune.workers.contracts import replica_gpus
from slotune.workers.trial.capacity import WARM_STEP

SLOTUNE = str(Path(sys.executable).with_name("slotune"))

LLAMA_70B_TP: dict[str, Any] = {
    "name": "llama70b-tp248", "engine": "sim", "model": "meta-llama/Llama-3.1-70B-Instruct",
    "gpu": "h200", "fixed": {"max_model_len": 8192},
    "knobs": {
        "tensor_parallel_size": {"type": "values", "values": [2, 4, 8], "default": 2},
        "max_num_seqs": {"type": "values", "values": [64, 256], "default": 256},
        "quantization": {"type": "categorical", "choices": [None, "fp8"], "default": None},
    },
    "workload": {"name": "chat-70b", "dataset": {"kind": "sharegpt-like"},
                 "arrivals": {"request_rate": 8}, "num_prompts": 200, "seed": 0},
    "slo": "ttft:500,tpot:50", "mode": "capacity",
    "capacity": {"min_rate": 0.5, "max_rate": 256, "relative_tolerance": 0.02,
                 "max_probes": 14},
}


def _run(tmp_path: Path, *args: str) -> tuple[Path, str]:
    db = tmp_path / "sweep.db"
    run = subprocess.run([SLOTUNE, "sweep", "run", "--executor", "virtual",
                          "--database-url", f"sqlite:///{db}", *args],
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return db, run.stdout


def _sweep(tmp_path: Path, space: str | dict[str, Any], *args: str) -> Path:
    if isinstance(space, dict):
        path = tmp_path / "space.yaml"
        path.write_text(yaml.safe_dump(space))
        space = str(path)
    return _run(tmp_path, "--space", space, "--gpus", "8", *args)[0]


def _rows(db: Path, sql: str) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(sql).fetchall()]


def test_the_main_job_answers_capacity_replicas_and_cost_for_the_seeds_rate(
        tmp_path: Path) -> None:
    # `slotune sweep run` as the README's first command runs it, in virtual time.
    db, out = _run(tmp_path, "--report-dir", str(tmp_path / "report"))
    [row] = _rows(db, "SELECT * FROM best_config_per_workload")
    assert row["workload"] == "lab" and row["gpu"] == "rtx4090"
    assert row["capacity"] > 0 and row["gpus"] == 1 and row["capacity_per_gpu"] == row["capacity"]
    [answer] = [line for line in out.splitlines() if line.startswith("answer: ")]
    # The sentence is the planner's answer for the workload's own rate: ask it directly.
    plan = json.loads(subprocess.run(
        [SLOTUNE, "plan", "-w", "lab", "--target-rps", "20", "--json", "--database-url",
         f"sqlite:///{db}"], capture_output=True, text=True, timeout=60, check=True).stdout)
    # one configuration, one interval, one trial everywhere: the sentence gives the
    # interval, and the plan sizes from its lower end, the view's capacity_low
    assert (f"carries {plan['per_replica_rps']:.3g}–{plan['capacity_high_rps']:.3g} req/s"
            in answer)
    assert plan["trial_ids"] == [row["trial_id"]] and plan["confirmed"] and row["confirmed"]
    assert plan["per_replica_rps"] == row["capacity_low"] < row["capacity"] \
        < row["capacity_high"] == plan["capacity_high_rps"]
    assert plan["replicas"] * plan["per_replica_rps"] * 0.8 >= 20 > (
        plan["replicas"] - 1) * plan["per_replica_rps"] * 0.8
    assert (f"20 req/s needs {plan['replicas']} replicas ({plan['gpus']} GPUs, "
            f"${plan['cost_per_hour']:.2f}/h, 20% headroom, sized on") in answer
    # the confirmed interval is the confirmation's: its repeats' hull, measured on samples
    # of their own, never the search run that made it a candidate
    repeats = _rows(db, f"SELECT spec, result FROM sweep_trials WHERE role = 'repeat' AND "
                        f"repeat_of = {row['trial_id']} AND status = 'ok'")
    assert len(repeats) == 2
    search_seed = json.loads(_rows(db, f"SELECT spec FROM sweep_trials WHERE id = "
                                       f"{row['trial_id']}")[0]["spec"])["workload"]["seed"]
    seeds = {json.loads(r["spec"])["workload"]["seed"] for r in repeats}
    assert len(seeds) == 2 and search_seed not in seeds
    lows = [json.loads(r["result"])["capacity_low"] for r in repeats]
    highs = [json.loads(r["result"])["capacity_high"] for r in repeats]
    assert (row["capacity_low"], row["capacity_high"]) == (min(lows), max(highs))
    number = _rows(db, f"SELECT number FROM sweep_trials WHERE id = {row['trial_id']}")[0]
    assert row["number"] == number["number"]  # the log's trial number, in the view
    best_lines = [line for line in out.splitlines() if " phase done" in line or "best " in line]
    assert any(f"(trial {row['number']})" in line for line in best_lines)
    assert plan["cost_per_hour"] == pytest.approx(plan["gpus"] * 0.5)  # rtx4090 at $0.50
    assert answer.startswith("answer: Qwen/Qwen2.5-7B-Instruct on one RTX 4090 carries ")
    assert "under p99 TTFT ≤ 300 ms / TPOT ≤ 50 ms with " in answer
    # The report leads with the same sentence, then says what the gate checked.
    html = next((tmp_path / "report").glob("*.html")).read_text()
    assert html.index(escape(answer.removeprefix("answer: "))) < html.index("<h2")
    assert "Quality checks" in html
    # A lossy winner (the lab's fp8 weights or KV) got there only through its check.
    [winner] = _rows(db, f"SELECT config, result FROM sweep_trials WHERE id = {row['trial_id']}")
    config = json.loads(winner["config"])
    quality = json.loads(winner["result"]).get("quality")
    if config["quantization"] == "fp8" or config["kv_cache_dtype"] == "fp8":
        assert quality["passed"] is True and quality["checked"] is True
        assert "golden-request check" in answer
    lossy = _rows(db, "SELECT result FROM sweep_trials WHERE status = 'ok' AND "
                      "json_extract(result, '$.quality') IS NOT NULL")
    assert lossy, "the lab space's search measured no lossy configuration"
    # Search trials rank (the ranking probes: the sample's own percentile) and start where
    # the twin's prior, scaled by what was measured, puts each capacity; confirmation
    # repeats measure with the full design at 95 %.
    specs = [json.loads(r["spec"]) for r in _rows(
        db, "SELECT spec FROM sweep_trials WHERE spec IS NOT NULL AND role = 'search' "
            "ORDER BY id")]
    assert all(s["capacity"]["confidence"] == 0.5 and s["capacity"]["start_rate"]
               and s["capacity"]["step"] == WARM_STEP for s in specs)
    assert all(json.loads(r["spec"])["capacity"]["confidence"] == 0.95 for r in repeats)


def test_a_70b_tp_248_grid_picks_the_best_capacity_per_gpu(tmp_path: Path) -> None:
    db = _sweep(tmp_path, LLAMA_70B_TP, "--strategy", "grid", "--trials", "12",
                "--confirm-top", "2", "--confirm-repeats", "2")
    trials = _rows(db, "SELECT id, config, capacity, gpus, objective, result FROM sweep_trials "
                       "WHERE status = 'ok' AND capacity > 0 AND role = 'search'")
    assert {json.loads(t["config"])["tensor_parallel_size"] for t in trials} == {2, 4, 8}
    for t in trials:  # the objective is per GPU; the per-replica capacity is kept
        gpus = replica_gpus(json.loads(t["config"]))
        assert t["gpus"] == gpus
        assert t["objective"] == pytest.approx(t["capacity"] / gpus)
    most_per_replica = max(trials, key=lambda t: t["capacity"])
    [row] = _rows(db, "SELECT * FROM best_config_per_workload")
    # The winner is the confirmed candidate with the most per GPU, or one the
    # measurements cannot tell from it (per-GPU intervals overlap): no confirmed
    # candidate's interval lies wholly above the winner's.
    confirmed = _rows(db, "SELECT id, capacity_low, capacity_high, gpus FROM sweep_trials "
                          "WHERE role = 'search' AND repeats > 0")
    assert row["trial_id"] in {c["id"] for c in confirmed} and row["confirmed"]
    assert all(c["capacity_low"] / c["gpus"] <= row["capacity_high"] / row["gpus"]
               for c in confirmed)
    assert row["capacity_per_gpu"] == pytest.approx(row["capacity"] / row["gpus"])
    assert row["gpus"] == json.loads(row["config"])["tensor_parallel_size"]
    # More GPUs carry more per replica here, and still do not win per GPU.
    assert json.loads(most_per_replica["config"])["tensor_parallel_size"] == 8
    assert row["gpus"] < 8
    winner = next(t for t in trials if t["id"] == row["trial_id"])
    quality = json.loads(winner["result"]).get("quality")
    if json.loads(row["config"]).get("quantization") == "fp8":
        assert quality["passed"] is True and quality["method"] == "golden"
    else:
        assert quality is None  # lossless: nothing to check


def test_the_shipped_h200_tp_space_ranks_per_gpu(tmp_path: Path) -> None:
    db = _sweep(tmp_path, "h200-tp", "--strategy", "tpe", "--trials", "10", "--seed", "3",
                "--confirm-top", "0")
    trials = _rows(db, "SELECT capacity, gpus FROM sweep_trials "
                       "WHERE status = 'ok' AND capacity > 0 AND role = 'search'")
    assert {t["gpus"] for t in trials} >= {2}
    [row] = _rows(db, "SELECT * FROM best_config_per_workload")
    assert row["capacity_per_gpu"] == pytest.approx(max(t["capacity"] / t["gpus"]
                                                        for t in trials))


def test_allowed_lossy_values_are_measured_unchecked_and_the_report_warns(
        tmp_path: Path) -> None:
    # The lab grid's last knob is quantization: every second configuration is fp8.
    db, _ = _run(tmp_path, "--strategy", "grid", "--trials", "2", "--confirm-top", "0",
                 "--allow-lossy", "--report-dir", str(tmp_path / "report"))
    [lossy] = [json.loads(r["result"]) for r in _rows(
        db, "SELECT result FROM sweep_trials WHERE json_extract(config, '$.quantization') "
            "= 'fp8'")]
    assert lossy["quality"]["checked"] is False and lossy["quality"]["passed"] is None
    assert lossy["objective"] > 0  # scored, unchecked
    [space] = [json.loads(r["space"]) for r in _rows(db, "SELECT space FROM sweeps")]
    assert space["quality"]["allow_lossy"] is True  # a resumed sweep runs the same
    markdown = next((tmp_path / "report").glob("*.md")).read_text()
    assert "Lossy values were allowed without their quality check (--allow-lossy)" in markdown
    assert "not checked" in markdown


def test_the_shipped_moe_space_wins_per_gpu_and_plans_every_data_parallel_gpu(
        tmp_path: Path) -> None:
    # Qwen3-30B-A3B: TP 1/2/4 × DP 1/2/4 × expert parallelism, within one 8-GPU node.
    db = _sweep(tmp_path, "moe-h100", "--strategy", "grid", "--trials", "18",
                "--confirm-top", "0")
    trials = _rows(db, "SELECT id, config, capacity, gpus, objective FROM sweep_trials "
                       "WHERE status = 'ok' AND capacity > 0 AND role = 'search'")
    layouts = {(c["tensor_parallel_size"], c["data_parallel_size"], c["enable_expert_parallel"])
               for c in (json.loads(t["config"]) for t in trials)}
    assert len(layouts) == 15  # all but TP4 × DP4 (16 GPUs) and expert parallel on one GPU
    for t in trials:
        config = json.loads(t["config"])
        assert t["gpus"] == (config["tensor_parallel_size"] * config["data_parallel_size"])
        assert t["objective"] == pytest.approx(t["capacity"] / t["gpus"])
    [row] = _rows(db, "SELECT * FROM best_config_per_workload")
    best = max(trials, key=lambda t: t["capacity"] / t["gpus"])
    assert row["trial_id"] == best["id"]
    assert row["capacity_per_gpu"] == pytest.approx(best["capacity"] / best["gpus"])
    # a question the layouts answer differently: the per-GPU spread is wide
    per_gpu = sorted(t["capacity"] / t["gpus"] for t in trials)
    assert per_gpu[-1] > 1.5 * per_gpu[0]
    # The planner prices a target that needs several replicas of a data-parallel layout:
    # every rank's GPUs are counted.
    target = 3 * max(t["capacity"] for t in trials)
    plan = json.loads(subprocess.run(
        [SLOTUNE, "plan", "-w", "lab", "--target-rps", str(target), "--json",
         "--gpu-price", "h100-sxm=2.5", "--database-url", f"sqlite:///{db}"],
        capture_output=True, text=True, timeout=60, check=True).stdout)
    config = plan["config"]
    layout = (config["tensor_parallel_size"] * config.get("pipeline_parallel_size", 1)
              * config["data_parallel_size"])
    assert config["data_parallel_size"] > 1
    assert plan["gpus_per_replica"] == layout
    assert plan["gpus"] == plan["replicas"] * layout and plan["replicas"] > 1
    assert plan["cost_per_hour"] == pytest.approx(plan["gpus"] * 2.5)
