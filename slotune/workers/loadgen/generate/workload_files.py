"""Named workloads: the built-in YAML files (package data) and users' own, same format.

A workload file is the :class:`~slotune.workers.contracts.Workload` model as YAML. Errors name
the file and the field (``rag.yaml: dataset.prefix_len: Input should be …``). Files are
read with :func:`slotune.workers.safe_yaml.load_yaml_file` (1 MiB cap, no aliases, no tags).

**Trace paths.** A file dataset's ``path`` (``trace``, ``sharegpt``, ``custom``) is data
someone else may have written,
so where it may point is fixed: it must resolve — symlinks followed — inside the
workload file's own directory, or inside ``$SLOTUNE_HOME`` when that is set. A relative
path resolves against the workload file's directory (for a workload given inline, with
no file, against ``$SLOTUNE_HOME``; for a built-in, against the package's
``workloads`` folder, where its trace ships). ``../../etc/passwd``, an absolute path elsewhere and
a symlink pointing out are refused with the rule. Once checked, the path is stored
absolute, so a trial reads the same file from any working directory. (A trace given
directly on the command line, ``slotune bench --dataset-path``, is the caller's own
choice and is not restricted.) A workload posted to the API (:mod:`slotune.workers.trust`) names
its file by a relative path inside the operator's data directories instead.

**Read at submit.** Once its path is checked, the file is read as a trial reads it,
every line (:func:`~slotune.workers.loadgen.generate.datasets.check_dataset_file`): a bad line is
refused where the workload is given, naming the line and the field, never the content.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from slotune.workers.contracts import FILE_DATASETS, Workload
from slotune.workers.loadgen.generate.datasets import DatasetError, check_dataset_file
from slotune.workers.safe_yaml import YamlInputError, load_yaml, load_yaml_file
from slotune.workers.trust import OPERATOR, Trust, TrustError

__all__ = [
    "WorkloadError",
    "builtin_workloads",
    "check_trace_path",
    "load_workload",
    "parse_workload",
    "trace_roots",
]

_PACKAGE = "slotune.workers.loadgen"


class WorkloadError(ValueError):
    """A workload could not be found or is invalid; the message names file and field."""


def builtin_workloads() -> list[str]:
    """Names of the workloads that ship with slotune."""
    folder = resources.files(_PACKAGE).joinpath("workloads")
    names = (p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))
    return sorted(names)


def _format_errors(exc: ValidationError, where: str) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"{where}: {loc}: {err['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def trace_roots(base: Path | None) -> list[Path]:
    """The directories a trace file may live in: ``base`` (the workload file's
    directory) and ``$SLOTUNE_HOME`` when set."""
    roots = [base] if base is not None else []
    home = os.environ.get("SLOTUNE_HOME")
    if home:
        roots.append(Path(home).expanduser())
    return roots


def check_trace_path(path: str, base: Path | None, where: str) -> Path:
    """The trace file ``path`` resolved (symlinks followed), if it lies under an allowed
    root (:func:`trace_roots`); :class:`WorkloadError` naming the rule otherwise."""
    roots = [r.resolve() for r in trace_roots(base)]
    if not roots:
        raise WorkloadError(
            f"{where}: dataset.path {path!r}: a trace in a workload given inline must live "
            "under $SLOTUNE_HOME, which is not set; put the workload in a YAML file next "
            "to its trace, or set SLOTUNE_HOME")
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = roots[0] / candidate
    resolved = candidate.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        allowed = " or ".join(str(r) for r in roots)
        raise WorkloadError(
            f"{where}: dataset.path {path!r} resolves to {resolved}, outside {allowed}; a "
            "trace file must live under the workload file's directory or $SLOTUNE_HOME "
            "(symlinks are followed)")
    return resolved


def parse_workload(data: Any, where: str, base: Path | None = None, *,
                   stored: bool = False, trust: Trust = OPERATOR) -> Workload:
    """Validate already-loaded YAML/JSON data; ``where`` names the source in errors.

    A trace path is checked against the trace rule (module docstring) with ``base`` as
    the workload file's directory — a client's (``trust``, :mod:`slotune.workers.trust`) against
    the operator's data directories instead — stored absolute, and the file read as a
    trial reads it (:func:`~slotune.workers.loadgen.generate.datasets.check_dataset_file`): a bad
    line is refused here, with its number and field. ``stored`` reads a workload slotune stored once
    it had passed those checks: its absolute path is kept as it is, unread (a relative one, which
    nothing stores, is still judged).
    """
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise WorkloadError(f"{where}: a workload is a mapping of fields, got {kind}")
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(_format_errors(exc, where)) from None
    dataset = workload.dataset
    if isinstance(dataset, FILE_DATASETS) and dataset.path is not None:
        if stored and Path(dataset.path).is_absolute():
            return workload
        try:
            resolved = trust.path(dataset.path, f"{where}: dataset.path", None) \
                if trust.client else check_trace_path(dataset.path, base, where)
        except TrustError as exc:
            raise WorkloadError(str(exc)) from None
        try:  # named as given: where it resolved is the server's business
            check_dataset_file(dataset, resolved, f"{where}: dataset.path {dataset.path!r}")
        except DatasetError as exc:
            raise WorkloadError(str(exc)) from None
        workload = workload.model_copy(update={
            "dataset": dataset.model_copy(update={"path": str(resolved)})})
    return workload


def load_workload(name_or_path: str, *,
                  trust: Trust = OPERATOR) -> tuple[Workload, Path | None]:
    """A built-in workload by name, or a YAML file by path (a client's: a built-in only).

    Returns the workload and the directory relative trace paths resolve against.
    """
    try:
        trust.shipped(name_or_path, "workload", builtin_workloads())
    except TrustError as exc:
        raise WorkloadError(str(exc)) from None
    path = Path(name_or_path)
    if path.suffix in {".yaml", ".yml", ".json"} or path.exists():
        if not path.is_file():
            raise WorkloadError(f"workload file {path} does not exist")
        base: Path | None = path.resolve().parent
        where = str(path)
        try:
            data = load_yaml_file(path, where)
        except YamlInputError as exc:
            raise WorkloadError(str(exc)) from None
        return parse_workload(data, where, base), base
    else:
        folder = resources.files(_PACKAGE).joinpath("workloads")
        resource = folder.joinpath(f"{name_or_path}.yaml")
        if not resource.is_file():
            valid = ", ".join(builtin_workloads())
            raise WorkloadError(
                f"unknown workload {name_or_path!r}: not a built-in ({valid}) nor a YAML file"
            )
        where = f"{name_or_path}.yaml (built-in)"
        try:
            data = load_yaml(resource.read_text(encoding="utf-8"), where)
        except YamlInputError as exc:
            raise WorkloadError(str(exc)) from None
        # a built-in's trace ships beside it (package data): the same rule as a user's file
        base = Path(str(folder)) if isinstance(folder, Path) else None
    return parse_workload(data, where, base), base
