"""Bad input through the real entry points: a clear refusal, and nothing stored half-way.

Each case goes in where a user or a client would put it — a search space or workload
file given to ``slotune sweep submit`` / ``slotune trial run`` (subprocesses: exit code
2, one line on stderr, no traceback), the REST API (4xx with a reason), the Python
loaders (:class:`SpaceError`, :class:`WorkloadError`, :class:`ReportPathError`) — and
afterwards the database holds no new row and no file was written where it should not be.

The rules these tests pin down (also in the modules' docstrings):

* YAML is parsed safely and bounded: at most 1 MiB, no anchors/aliases (an alias bomb
  is refused before anything expands), no language tags (``!!python/object``).
* A trace file named in a workload must resolve, symlinks followed, under the workload
  file's directory or ``$SLOTUNE_HOME``; over the API, inside the operator's data
  directories (``SLOTUNE_DATA_DIRS``). It is read as a trial reads it before anything is
  stored: a bad line is refused with its number and field, never its content.
* A report directory is created when missing; an existing one must not be a symlink,
  and report files are never written through a symlink. A disk that is already full is
  refused up front; one that fills by the end costs the report (one line), not the sweep,
  and leaves no partial file.
* Engine arguments are an argv list: a hostile value is one argv element, the engine
  refuses it (``invalid_config``) and nothing it names runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from pydantic import SecretStr
from sqlalchemy import create_engine, inspect, text

from slotune.tuner.api import create_app
from slotune.tuner.db import migrate
from slotune.tuner.db.store import Store
from slotune.tuner.report import ReportPathError, write_report
from slotune.tuner.settings import ApiSettings, DatabaseSettings, Settings
from slotune.tuner.spaces import SpaceError, load_space, parse_space
from slotune.workers.loadgen import WorkloadError, load_workload
from slotune.workers.safe_yaml import MAX_YAML_BYTES
from tests.support.paths import REPO
from tests.support.sweep_data import populate_finished_sweep

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
LAB = yaml.safe_load((REPO / "search_spaces" / "lab.yaml").read_text())
LAB["workload"] = yaml.safe_load(  # inline, so a test can break one field of it
    (REPO / "slotune" / "workers" / "loadgen" / "workloads" / f"{LAB['workload']}.yaml")
    .read_text())
TOKEN = "bad-input-test-token-5d1e"

ALIAS_BOMB = """\
name: bomb
model: Qwen/Qwen2.5-7B-Instruct
a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
knobs:
  max_num_seqs: {type: values, values: *h}
"""
"""Ten to the eighth integers in 600 bytes, if aliases were expanded."""


def space_with(**changes: object) -> dict[str, object]:
    data = json.loads(json.dumps(LAB))
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return data  # type: ignore[no-any-return]


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('bad-input-db') / 'slotune.db'}"
    migrate.upgrade(url)
    return url


def row_counts(url: str) -> dict[str, int]:
    """Rows in every table (ours and Optuna's) except Alembic's version table."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = [t for t in inspect(conn).get_table_names() if t != "alembic_version"]
            return {t: int(conn.execute(text(f'SELECT COUNT(*) FROM "{t}"')).scalar_one())
                    for t in tables}
    finally:
        engine.dispose()


@pytest.fixture
def unchanged_db(db_url: str) -> Iterator[str]:
    """The module's database; asserts after the test that no table gained a row."""
    before = row_counts(db_url)
    yield db_url
    assert row_counts(db_url) == before


def slotune_refuses(*args: str, cwd: Path | None = None,
                    env: dict[str, str] | None = None) -> str:
    """Run ``slotune ARGS``; assert exit 2, one line on stderr, no traceback; return it."""
    proc = subprocess.run([SLOTUNE, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, cwd=cwd, env=env)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --- hostile and malformed YAML ------------------------------------------------------------


YAML_CASES = {
    "syntax": ("name: [unclosed\n", "not valid YAML"),
    "alias-bomb": (ALIAS_BOMB, "aliases"),
    "python-tag": ("name: x\nmodel: !!python/object/apply:os.system ['touch {marker}']\n"
                   "knobs: {{}}\n", "no language-specific tags"),
    "not-a-mapping": ("- max_num_seqs\n- max_num_batched_tokens\n", "mapping of fields"),
    "huge": ("description: '" + "x" * (MAX_YAML_BYTES + 10) + "'\n", "byte limit"),
    "duplicate-key": ("name: dup\nnum_prompts: 100\nknobs:\n  max_num_seqs: [32, 64]\n"
                      "  max_num_seqs: [128]\n",
                      "line 5: key 'max_num_seqs' is given twice"),
}


@pytest.mark.parametrize("case", list(YAML_CASES))
def test_hostile_yaml_is_refused_by_the_space_loader(case: str, tmp_path: Path) -> None:
    content, expected = YAML_CASES[case]
    marker = tmp_path / "pwned"
    path = tmp_path / f"{case}.yaml"
    path.write_text(content.format(marker=marker) if case == "python-tag" else content)
    with pytest.raises(SpaceError, match=expected) as info:
        load_space(path)
    assert str(path) in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("case", ["alias-bomb", "python-tag", "huge", "duplicate-key"])
def test_hostile_yaml_is_refused_by_the_workload_loader(case: str, tmp_path: Path) -> None:
    content, expected = YAML_CASES[case]
    marker = tmp_path / "pwned"
    path = tmp_path / f"{case}.yaml"
    path.write_text(content.format(marker=marker) if case == "python-tag" else content)
    with pytest.raises(WorkloadError, match=expected):
        load_workload(str(path))
    assert not marker.exists()


@pytest.mark.parametrize("case", ["syntax", "alias-bomb", "python-tag", "not-a-mapping",
                                  "duplicate-key"])
def test_hostile_yaml_through_the_cli_stores_nothing(case: str, tmp_path: Path,
                                                    unchanged_db: str) -> None:
    content, expected = YAML_CASES[case]
    marker = tmp_path / "pwned"
    path = tmp_path / "space.yaml"
    path.write_text(content.format(marker=marker) if case == "python-tag" else content)
    line = slotune_refuses("sweep", "submit", "--space", str(path),
                           "--database-url", unchanged_db)
    assert expected in line and str(path) in line
    assert not marker.exists()


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    start = time.perf_counter()
    with pytest.raises(SpaceError, match=r"line 4: YAML aliases \(\*a\)"):
        load_space(path)
    assert time.perf_counter() - start < 1.0


# --- unknown knobs and absurd values ------------------------------------------------------


SPACE_CASES = {
    "unknown-knob": (space_with(knobs__max_num_seq={"type": "values", "values": [64]}),
                     "max_num_seq: not an argument the sim engine takes; valid: "),
    "unknown-fixed": (space_with(fixed__tensor_paralel_size=2),
                      "tensor_paralel_size: not an argument the sim engine takes"),
    "gpu-mem-over-1": (space_with(knobs__gpu_memory_utilization={
        "type": "values", "values": [0.9, 1.5]}), "must be in (0, 1], got 1.5"),
    "gpu-mem-range-over-1": (space_with(knobs__gpu_memory_utilization={
        "type": "float", "low": 0.8, "high": 1.2}), "must be in (0, 1], got 1.2"),
    "max-model-len-beyond-model": (space_with(fixed__max_model_len=1_000_000),
                                   "beyond Qwen/Qwen2.5-7B-Instruct's context window "
                                   "(32768 tokens"),
    "zero-seqs": (space_with(knobs__max_num_seqs={"type": "values", "values": [0, 64]}),
                  "max_num_seqs must be an integer >= 1, got 0"),
    "negative-rate": (space_with(workload__arrivals__request_rate=-4),
                      "request_rate: Input should be greater than 0"),
    "billion-prompts": (space_with(workload__num_prompts=1_000_000_000),
                        "num_prompts: Input should be less than or equal to 1000000"),
}


@pytest.mark.parametrize("case", list(SPACE_CASES))
def test_absurd_spaces_are_refused_at_load_time(case: str) -> None:
    data, expected = SPACE_CASES[case]
    with pytest.raises(SpaceError) as info:
        parse_space(data, "space.yaml")
    assert expected in str(info.value)
    assert str(info.value).startswith("space.yaml")


@pytest.mark.parametrize("case", ["unknown-knob", "max-model-len-beyond-model",
                                  "billion-prompts"])
def test_absurd_spaces_through_the_cli_store_nothing(case: str, tmp_path: Path,
                                                     unchanged_db: str) -> None:
    data, expected = SPACE_CASES[case]
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    line = slotune_refuses("sweep", "submit", "--space", str(path),
                           "--database-url", unchanged_db)
    assert line.startswith("slotune: error: ") and expected in line


@pytest.mark.parametrize(("args", "expected"), [
    (["--set", "nosuchknob=1"], "--set nosuchknob: not a knob or fixed argument of space "
                                "'lab'; valid: max_num_seqs"),
    (["--num-prompts", "1000000000"], "--num-prompts: Input should be less than or equal "
                                      "to 1000000"),
    (["--request-rate", "-1"], "--request-rate: Input should be greater than 0"),
    (["--set", "max_num_seqs"], "expected knob=value"),
])
def test_trial_run_refuses_bad_arguments_before_booting(args: list[str], expected: str) -> None:
    line = slotune_refuses("trial", "run", "--space", "lab", *args)
    assert expected in line


@pytest.mark.parametrize(("args", "expected"), [
    (["--trials", "0"], "Invalid value for '--trials'"),
    (["--max-gpu-hours", "0"], "max_gpu_hours: Input should be greater than 0"),
    (["--max-gpu-hours", "-3"], "max_gpu_hours: Input should be greater than 0"),
])
def test_zero_or_negative_budgets_are_refused(args: list[str], expected: str,
                                              unchanged_db: str) -> None:
    line = slotune_refuses("sweep", "run", "--executor", "virtual", *args,
                           "--database-url", unchanged_db)
    assert expected in line


# --- path tricks --------------------------------------------------------------------------


def _trace_workload(folder: Path, trace_path: str) -> Path:
    path = folder / "workload.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "num_prompts": 2,
                                    "dataset": {"kind": "trace", "path": trace_path}}))
    return path


@pytest.mark.parametrize("trace", ["../../etc/passwd", "/etc/passwd", "link.jsonl"])
def test_trace_paths_outside_the_workload_folder_are_refused(
        trace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLOTUNE_HOME", raising=False)
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    (folder / "link.jsonl").symlink_to("/etc/passwd")
    with pytest.raises(WorkloadError, match=r"outside .*a/b; a trace file must live under"):
        load_workload(str(_trace_workload(folder, trace)))


def test_trace_paths_inside_the_allowed_folders_load_and_are_stored_absolute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "traces").mkdir(parents=True)
    line = '{"offset_s": 0, "prompt_len": 3, "output_len": 2}\n'
    (home / "traces" / "chat.jsonl").write_text(line)
    folder = tmp_path / "w"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "t.jsonl").write_text(line)
    workload, _ = load_workload(str(_trace_workload(folder, "data/t.jsonl")))
    assert workload.dataset.path == str((folder / "data" / "t.jsonl").resolve())  # type: ignore[union-attr]
    monkeypatch.setenv("SLOTUNE_HOME", str(home))
    workload, _ = load_workload(str(_trace_workload(folder, str(home / "traces/chat.jsonl"))))
    assert workload.dataset.path.endswith("traces/chat.jsonl")  # type: ignore[union-attr]


def test_trace_path_tricks_through_the_cli_store_nothing(tmp_path: Path,
                                                         unchanged_db: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SLOTUNE_HOME"}
    workload = _trace_workload(tmp_path, "../../../../../etc/passwd")
    line = slotune_refuses("sweep", "submit", "--workload", str(workload),
                           "--database-url", unchanged_db, env=env)
    assert "resolves to /etc/passwd, outside" in line


def test_report_is_never_written_through_a_symlink(tmp_path: Path, db_url: str) -> None:
    with Store(db_url) as store:
        sweep_id = populate_finished_sweep(store).sweep_id
        victim = tmp_path / "elsewhere"
        victim.mkdir()
        linked_dir = tmp_path / "reports"
        linked_dir.symlink_to(victim, target_is_directory=True)
        with pytest.raises(ReportPathError, match="is a symlink"):
            write_report(store, sweep_id, linked_dir)
        assert list(victim.iterdir()) == []

        real_dir = tmp_path / "real"
        real_dir.mkdir()
        target = tmp_path / "precious.txt"
        target.write_text("keep me")
        (real_dir / f"sweep-{sweep_id}.html").symlink_to(target)
        with pytest.raises(ReportPathError, match="is a symlink"):
            write_report(store, sweep_id, real_dir)
        assert target.read_text() == "keep me"

        html, md = write_report(store, sweep_id, tmp_path / "new" / "dir")
        assert html.is_file() and md.is_file()


def test_report_never_goes_through_a_link_planted_in_a_shared_directory(
        tmp_path: Path, db_url: str) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    shared = tmp_path / "shared"  # like /tmp: anyone may create a link in it
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "reports").symlink_to(victim, target_is_directory=True)
    private = tmp_path / "private"  # a link only its owner could have made is followed
    private.mkdir(mode=0o755)
    (private / "disk").symlink_to(victim, target_is_directory=True)
    with Store(db_url) as store:
        sweep_id = populate_finished_sweep(store).sweep_id
        with pytest.raises(ReportPathError, match="could have been planted"):
            write_report(store, sweep_id, shared / "reports" / "sweep")
        assert list(victim.iterdir()) == []
        html, _ = write_report(store, sweep_id, private / "disk" / "sweep")
        assert (victim / "sweep" / html.name).is_file()


@pytest.mark.parametrize("where", ["/proc/1/reports", "a-file/reports"])
def test_unwritable_report_directories_are_refused_before_a_sweep_starts(
        where: str, tmp_path: Path, unchanged_db: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    line = slotune_refuses("sweep", "run", "--executor", "virtual", "--trials", "1",
                           "--report-dir", where, "--database-url", unchanged_db, cwd=tmp_path)
    assert line.startswith("slotune: error: --report-dir:") and "cannot be written" in line
    line = slotune_refuses("sweep", "report", "1", "--output", where,
                           "--database-url", unchanged_db, cwd=tmp_path)
    assert "--output:" in line and "cannot be written" in line


def _on_a_small_disk(size_kib: int, directory: Path, *command: str) -> tuple[int, str, str]:
    """Run ``command`` with ``directory`` on a tmpfs of ``size_kib`` KiB, mounted in a
    private mount namespace (``unshare``: no root needed, nothing left mounted); the
    output ends with what the directory holds afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    script = ('dir=$1; shift; mount -t tmpfs -o size="$0"k tmpfs "$dir" || exit 99; "$@"; '
              'code=$?; echo "LEFT: $(ls -A "$dir" | tr "\\n" " ")"; exit $code')
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script, str(size_kib),
                           str(directory), *command], capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode != 99, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
def test_a_report_disk_that_fills_up_gives_one_line_and_no_partial_file(
        tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    code, out, err = _on_a_small_disk(
        32, reports, SLOTUNE, "sweep", "run", "--executor", "virtual", "--strategy", "random",
        "--trials", "2", "--confirm-top", "0", "--report-dir", str(reports),
        "--database-url", f"sqlite:///{tmp_path / 'slotune.db'}")
    assert code == 0, err[-2000:]  # the sweep's exit code, kept
    assert "Traceback" not in out + err
    said = [line for line in (out + err).splitlines() if "report" in line and "not" in line]
    assert len(said) == 1 and "the disk is full" in said[0] and "sweep report 1" in said[0]
    assert out.rstrip().endswith("LEFT:")  # neither sweep-1.html, nor a part of it
    # The sweep is stored: the report can be written later, elsewhere.
    later = subprocess.run([SLOTUNE, "sweep", "report", "1", "--output", str(tmp_path / "r2"),
                            "--database-url", f"sqlite:///{tmp_path / 'slotune.db'}"],
                           capture_output=True, text=True, timeout=60)
    assert later.returncode == 0 and Path(later.stdout.strip()).stat().st_size > 32 * 1024


def test_a_report_disk_already_full_is_refused_before_a_sweep_starts(
        tmp_path: Path, unchanged_db: str) -> None:
    reports = tmp_path / "reports"
    code, _, err = _on_a_small_disk(
        8, reports, SLOTUNE, "sweep", "run", "--executor", "virtual", "--trials", "1",
        "--report-dir", str(reports), "--database-url", unchanged_db)
    assert code == 2 and "Traceback" not in err
    assert "KiB free" in err and "--report-dir" in err, err


# --- workload files checked at submit ------------------------------------------------------
#
# A file a workload names is read as a trial reads it, before anything is stored: a bad
# line is refused with its number and field (never its content), not queued to fail on
# every worker.

_GOOD_LINE = '{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n'
_MARK = "SeCrEtCoNtEnT"
"""In every bad line: a refusal names the line and the field, never what the file holds."""

BAD_FILES: dict[str, tuple[dict[str, object], str, str]] = {
    # case: (dataset, the file's text, what the refusal says)
    "mooncake-negative-length": (
        {"kind": "mooncake_trace"},
        _GOOD_LINE + '{"timestamp": 5, "input_length": -3, "output_length": 4, '
                     f'"note": "{_MARK}"}}\n', "line 2: field 'input_length'"),
    "mooncake-fractional-length": (
        {"kind": "mooncake_trace"},
        _GOOD_LINE + '{"timestamp": 5, "input_length": 12.5, "output_length": 4}\n',
        "line 2: field 'input_length'"),
    "mooncake-nan": (
        {"kind": "mooncake_trace"},
        _GOOD_LINE + '{"timestamp": NaN, "input_length": 3, "output_length": 4}\n',
        "line 2: field 'timestamp'"),
    "mooncake-nan-length": (
        {"kind": "mooncake_trace"},
        _GOOD_LINE + '{"timestamp": 5, "input_length": 3, "output_length": NaN}\n',
        "line 2: field 'output_length'"),
    "mooncake-string-hash-ids": (
        {"kind": "mooncake_trace"},
        _GOOD_LINE + f'{{"timestamp": 5, "input_length": 3, "output_length": 4, '
                     f'"hash_ids": ["{_MARK}"]}}\n', "line 2: field 'hash_ids'"),
    "mooncake-not-an-object": (
        {"kind": "mooncake_trace"}, _GOOD_LINE + f'["{_MARK}"]\n',
        "line 2: expected a JSON object"),
    "mooncake-timestamps-out-of-order": (
        {"kind": "mooncake_trace"},
        '{"timestamp": 10, "input_length": 3, "output_length": 4}\n'
        '{"timestamp": 5, "input_length": 3, "output_length": 4}\n',
        "line 2: field 'timestamp'"),
    "mooncake-bad-line-beyond-num-prompts": (
        {"kind": "mooncake_trace"}, _GOOD_LINE * 5 + f'"{_MARK}"\n',
        "line 6: expected a JSON object"),
    "trace-bad-output-len": (
        {"kind": "trace"}, f'{{"offset_s": 0, "prompt_len": 3, "output_len": "{_MARK}"}}\n',
        "line 1: field 'output_len'"),
    "sharegpt-not-json": ({"kind": "sharegpt"}, f"{_MARK} is not JSON\n", "not valid JSON"),
    "sharegpt-not-a-list": ({"kind": "sharegpt"}, f'{{"{_MARK}": 1}}',
                            "expected a JSON list of conversations"),
    "sessions-without-conversations": (
        {"kind": "multi_turn"}, f'[{{"id": "{_MARK}", "conversations": []}}]',
        "no conversation with at least 2 human turns"),
    "custom-without-prompt": ({"kind": "custom", "output_len": 8},
                              f'{{"text": "{_MARK}"}}\n', "line 1: each line needs a text"),
}


def _file_workload(folder: Path, case: str) -> Path:
    """A workload file whose dataset reads ``case``'s bad file, beside it."""
    dataset, content, _ = BAD_FILES[case]
    suffix = ".json" if dataset["kind"] in ("sharegpt", "multi_turn") else ".jsonl"
    (folder / f"data{suffix}").write_text(content)
    path = folder / "workload.yaml"
    path.write_text(yaml.safe_dump({"name": "bad-file", "num_prompts": 2,
                                    "dataset": {**dataset, "path": f"data{suffix}"}}))
    return path


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_workload_files_are_refused_at_submit_with_line_and_field(
        case: str, tmp_path: Path, unchanged_db: str) -> None:
    workload = _file_workload(tmp_path, case)
    line = slotune_refuses("sweep", "submit", "--workload", str(workload),
                           "--database-url", unchanged_db)
    assert BAD_FILES[case][2] in line, line
    assert "dataset.path 'data.json" in line  # the file, as the workload names it
    assert _MARK not in line


@pytest.mark.parametrize("case", ["mooncake-nan", "sessions-without-conversations"])
def test_bad_workload_files_are_refused_before_a_foreground_sweep_or_a_trial(
        case: str, tmp_path: Path, unchanged_db: str) -> None:
    workload = _file_workload(tmp_path, case)
    for args in (["sweep", "run", "--executor", "virtual", "--database-url", unchanged_db],
                 ["trial", "run", "--space", "lab"]):
        line = slotune_refuses(*args, "--workload", str(workload))
        assert BAD_FILES[case][2] in line and _MARK not in line, line


def test_a_good_trace_with_ties_and_a_partial_last_block_is_accepted(
        tmp_path: Path, db_url: str) -> None:
    """What the check refuses is what a trial cannot read, nothing more."""
    (tmp_path / "data.jsonl").write_text(
        _GOOD_LINE + '{"timestamp": 0, "input_length": 513, "output_length": 1, '
                     '"hash_ids": [0, 2]}\n\n')
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump({"name": "good-trace", "num_prompts": 2, "dataset": {
        "kind": "mooncake_trace", "path": "data.jsonl"}}))
    proc = subprocess.run([SLOTUNE, "sweep", "submit", "--workload", str(path),
                           "--database-url", db_url], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", ["mooncake-string-hash-ids", "sharegpt-not-json",
                                  "sessions-without-conversations"])
async def test_bad_files_in_the_data_directories_are_refused_over_the_api(
        case: str, tmp_path: Path, unchanged_db: str) -> None:
    from slotune.tuner.settings import TrustSettings

    _file_workload(tmp_path, case)
    dataset, _, expected = BAD_FILES[case]
    name = next(p.name for p in tmp_path.iterdir() if p.name.startswith("data"))
    settings = Settings(database=DatabaseSettings(url=unchanged_db),
                        api=ApiSettings(token=SecretStr(TOKEN)),
                        trust=TrustSettings(data_dirs=[tmp_path]))
    with Store(unchanged_db) as store:
        app = create_app(settings, store=store)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            response = await client.post("/api/v1/sweeps", headers=WRITE, json={
                "workload": {"name": "bad", "num_prompts": 2,
                             "dataset": {**dataset, "path": name}}})
    assert response.status_code == 422, response.text
    assert expected in response.text and _MARK not in response.text
    assert str(tmp_path) not in response.text  # where the data directories are is the server's


# --- the REST API -------------------------------------------------------------------------


@pytest.fixture
async def api(db_url: str) -> Iterator[httpx.AsyncClient]:  # type: ignore[misc]
    settings = Settings(database=DatabaseSettings(url=db_url),
                        api=ApiSettings(token=SecretStr(TOKEN), max_body_bytes=64 * 1024))
    with Store(db_url) as store:
        app = create_app(settings, store=store)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield client


WRITE = {"Authorization": f"Bearer {TOKEN}"}

API_CASES = {
    "space-path": ({"space": "../../etc/passwd"}, 422, "not a file path"),
    "absolute-space-path": ({"space": "/etc/passwd"}, 422, "not a file path"),
    "workload-path": ({"workload": "../workloads/x.yaml"}, 422, "not a file path"),
    "inline-trace-path": ({"workload": {"dataset": {"kind": "trace",
                                                    "path": "../../etc/passwd"}}},
                          422, "not a file in the data directories"),
    "inline-device-file": ({"space": space_with(gpu="/etc/passwd.yaml")}, 422,
                           "not a file in the data directories"),
    "inline-sim-model-dir": ({"space": space_with(model="/etc")}, 422,
                             "not a file in the data directories"),
    "unknown-knob": ({"space": space_with(knobs__nosuchknob={"type": "bool"})}, 422,
                     "nosuchknob: not an argument the sim engine takes"),
    "gpu-mem": ({"space": space_with(knobs__gpu_memory_utilization={
        "type": "values", "values": [1.3]})}, 422,
                "must be in (0, 1]"),
    "billion-prompts": ({"workload": {"num_prompts": 10**9}}, 422,
                        "less than or equal to 1000000"),
    "negative-rate": ({"workload": {"arrivals": {"request_rate": -1}}}, 422,
                      "greater than 0"),
    "zero-budget": ({"budget": {"max_trials": 0}}, 422, "greater than or equal to 1"),
    "oversized": ({"space": space_with(description="x" * 100_000)}, 413, "larger than"),
}


@pytest.mark.parametrize("case", list(API_CASES))
async def test_api_refuses_bad_sweep_requests(case: str, api: httpx.AsyncClient,
                                              unchanged_db: str) -> None:
    body, code, reason = API_CASES[case]
    response = await api.post("/api/v1/sweeps", json=body, headers=WRITE)
    assert response.status_code == code, response.text
    assert reason in response.text


async def test_api_write_without_token_is_refused(api: httpx.AsyncClient,
                                                  unchanged_db: str) -> None:
    response = await api.post("/api/v1/sweeps", json={})
    assert response.status_code == 401
    wrong = await api.post("/api/v1/sweeps", json={},
                           headers={"Authorization": "Bearer nope"})
    assert wrong.status_code in (401, 403)


# --- smuggling a second command through an engine argument ----------------------------------


@pytest.mark.slow
def test_hostile_knob_values_reach_the_engine_as_one_argv_element(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    victim = tmp_path / "victim"
    victim.mkdir()
    hostile = {
        "max_num_seqs": f"$(touch {marker})",
        "max_num_batched_tokens": f"8; rm -rf {victim}",
        "kv_cache_dtype": "--served-model-name x --enforce-eager",
    }
    sets = [arg for name, value in hostile.items() for arg in ("--set", f"{name}={value}")]
    proc = subprocess.run([SLOTUNE, "trial", "run", "--space", "lab", *sets,
                           "--num-prompts", "5", "--time-scale", "2", "--json"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 3, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "failed" and result["failure"] == "invalid_config"
    argv = result["engine"]["argv"]
    for name, value in hostile.items():  # each value inside one argv element with its flag
        assert f"--{name.replace('_', '-')}={value}" in argv
    assert "--enforce-eager" not in argv
    assert "invalid int value: '$(touch" in result["failure_message"]
    assert not marker.exists()
    assert victim.is_dir()


def test_hostile_values_are_single_argv_elements_for_both_engines(tmp_path: Path) -> None:
    from slotune.workers.engines import make_engine

    space = load_space("lab")
    values = {"max_num_seqs": "$(touch /tmp/pwned)", "max_num_batched_tokens": "8; rm -rf /",
              "kv_cache_dtype": "--served-model-name x --enforce-eager"}
    spec = space.to_trial_spec({**space.defaults(), **values}, "t-hostile")
    for kind in ("sim", "vllm"):
        argv = make_engine(spec.for_engine(kind), tmp_path).argv(8000)
        for name, value in values.items():
            assert f"--{name.replace('_', '-')}={value}" in argv
        assert "--enforce-eager" not in argv and "rm" not in argv


@pytest.mark.parametrize("command", [("sweep", "status"), ("best",), ("plan", "-w", "lab",
                                                                       "--target-rps", "20")])
def test_bad_gpu_prices_in_the_environment_are_one_line_in_every_command(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    env = {**os.environ, "SLOTUNE_HOME": str(tmp_path), "SLOTUNE_GPU_PRICES": '{"h100": -1}'}
    line = slotune_refuses(*command, env=env)
    assert "SLOTUNE_GPU_PRICES" in line and "price of 'h100'" in line
