"""`slotune plan`: the capacity planner from the command line, on stored measurements.

In-process through ``slotune.tuner.cli.main`` (the console script's entry point, exit codes and
all); ``--json`` is compared with what ``POST /api/v1/capacity`` answers on the same store.
"""

from __future__ import annotations

import json

import httpx
import pytest

from slotune.tuner.api import create_app
from slotune.tuner.cli.main import main
from slotune.tuner.db.store import Store
from slotune.tuner.settings import get_settings
from slotune.workers.contracts import SLO, Workload
from tests.support.api import settings_for
from tests.support.api_data import measure

QWEN = "Qwen/Qwen2.5-7B-Instruct"
pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


@pytest.fixture(autouse=True)
def _no_prices_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLOTUNE_GPU_PRICES", raising=False)
    get_settings.cache_clear()


def slotune(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return int(exited.value.code or 0), out, err


def fleet(into: Store, slo: str = "ttft:300,tpot:50") -> dict[str, int]:
    """48 req/s of 'fleet' fits 2 × h100-sxm (30 req/s each) or 5 × l40s (12 each)."""
    trials = {}
    for gpu, capacity in (("h100-sxm", 30.0), ("l40s", 12.0)):
        sweep = into.create_sweep(name=gpu, workload=Workload(name="fleet"),
                                  slo=SLO.parse(slo), space={}, model=QWEN, gpu=gpu,
                                  strategy="random", mode="capacity")
        trials[gpu] = measure(into, sweep.id, 0, {"max_num_seqs": 128}, capacity,
                              capacity=capacity)
    return trials


def test_plan_says_the_cheapest_in_one_sentence_then_the_options(
        store: Store, migrated_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    trials = fleet(store)
    code, out, err = slotune(capsys, "plan", "-w", "fleet", "--target-rps", "48",
                             "--gpu-price", "h100-sxm=3", "--gpu-price", "l40s=1",
                             "--database-url", migrated_url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == ("48 req/s of fleet needs 5 × l40s replicas (5 GPUs, $5.00/h) of "
                        f"{QWEN} with max_num_seqs=128, from measured capacity 12 req/s per "
                        "replica")
    assert lines[1].strip() == f"vllm serve {QWEN} --max-num-seqs=128"
    rows = [line for line in lines if QWEN in line and "│" in line]
    assert len(rows) == 2 and "l40s" in rows[0] and "h100-sxm" in rows[1]
    assert "$5.00" in rows[0] and "$6.00" in rows[1] and str(trials["h100-sxm"]) in rows[1]

    # A later --gpu-price of the same GPU wins; a GPU without a price is ranked after.
    code, out, _ = slotune(capsys, "plan", "-w", "fleet", "--target-rps", "48",
                           "--gpu-price", "h100-sxm=9", "--gpu-price", "h100-sxm=2",
                           "--database-url", migrated_url)
    assert code == 0 and out.startswith(
        "48 req/s of fleet needs 2 × h100-sxm replicas (2 GPUs, $4.00/h)")


async def test_plan_json_is_the_apis_answer(
        store: Store, migrated_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fleet(store)
    fleet(store, slo="ttft:1000,tpot:100")  # so the answer carries a note
    monkeypatch.setenv("SLOTUNE_GPU_PRICES", '{"h100-sxm": 2.0, "l40s": 1.5}')
    get_settings.cache_clear()
    ask = ["-w", "fleet", "--target-rps", "48", "--headroom", "0.2", "--slo",
           "ttft:300,tpot:50", "--gpu-price", "l40s=0.5"]
    code, out, err = slotune(capsys, "plan", *ask, "--json", "--database-url", migrated_url)
    assert (code, err) == (0, "")
    cli = json.loads(out)

    app = create_app(settings_for(migrated_url), store=store)  # reads SLOTUNE_GPU_PRICES too
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://slotune.test") as c:
        api = (await c.post("/api/v1/capacity", json={
            "workload": "fleet", "target_rps": 48, "headroom": 0.2,
            "slo": "ttft:300,tpot:50", "gpu_prices": {"l40s": 0.5}})).json()
    assert cli == api
    assert (cli["gpu"], cli["cost_per_hour"]) == ("l40s", 2.5)
    assert [o["cost_per_hour"] for o in cli["options"]] == [2.5, 4.0]
    assert len(cli["notes"]) == 1 and "another SLO" in cli["notes"][0]


@pytest.mark.parametrize(("args", "message"), [
    (["--gpu-price", "h100-sxm"], "--gpu-price 'h100-sxm': expected NAME=PRICE"),
    (["--gpu-price", "=3"], "--gpu-price '=3': expected NAME=PRICE"),
    (["--gpu-price", "h100-sxm=cheap"], "--gpu-price 'h100-sxm=cheap': expected NAME=PRICE"),
    (["--gpu-price", "h100-sxm=-1"], "price of 'h100-sxm': Input should be greater than or "
                                     "equal to 0"),
    (["--gpu-price", "h100-sxm=inf"], "price of 'h100-sxm': Input should be a finite number"),
    (["--target-rps", "0"], "--target-rps: Input should be greater than 0"),
    (["--headroom", "1"], "--headroom: Input should be less than or equal to 0.95"),
    (["--slo", "fast"], "--slo 'fast': not an SLO"),
    (["-w", "nowhere"], "no workload named 'nowhere'"),
])
def test_a_mistake_is_one_line_and_exit_2(
        store: Store, migrated_url: str, capsys: pytest.CaptureFixture[str],
        args: list[str], message: str) -> None:
    fleet(store)
    code, out, err = slotune(capsys, "plan", "-w", "fleet", "--target-rps", "10", *args,
                             "--database-url", migrated_url)
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith("slotune: error: ") and message in line, line


def test_what_the_store_cannot_answer_exits_as_documented(
        store: Store, migrated_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: str) -> tuple[int, str]:
        code, out, err = slotune(capsys, "plan", "-w", "fleet", "--target-rps", "10", *args,
                                 "--database-url", migrated_url)
        assert out == ""
        [line] = err.splitlines()
        return code, line

    sweep = store.create_sweep(name="s", workload=Workload(name="fleet"),
                               slo=SLO.parse("ttft:300,tpot:50"), space={}, model=QWEN,
                               gpu="l40s", strategy="random", mode="capacity")
    code, line = refused()
    assert code == 1 and "nothing measured yet for workload 'fleet'" in line
    measure(store, sweep.id, 0, {"max_num_seqs": 512}, 0.0, capacity=0.0, gate=False)
    code, line = refused()
    assert code == 3 and "no configuration met the SLO" in line
    fleet(store, slo="ttft:1000,tpot:100")
    code, line = refused()
    assert code == 2 and "measured under 2 SLOs" in line and line.endswith("with --slo")
    code, line = refused("--slo", "ttft:200")
    assert code == 1 and "no finished trial under that SLO" in line and "2 other SLOs" in line

    monkeypatch.setenv("SLOTUNE_GPU_PRICES", '{"l40s": -1}')
    get_settings.cache_clear()
    code, line = refused("--slo", "ttft:1000,tpot:100")
    assert code == 2 and line.startswith("slotune: error: SLOTUNE_GPU_PRICES: expected a JSON "
                                         "object")
