"""Named workloads: the built-in YAML files (package data) and users' own, same format.

A workload file is the :class:`~workers.contracts.Workload` model as YAML. Errors name
the file and the field (``rag.yaml: dataset.prefix_len: Input should be …``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from workers.contracts import Workload

__all__ = ["WorkloadError", "builtin_workloads", "load_workload", "parse_workload"]

_PACKAGE = "workers.loadgen"


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
        lines.append(f"{where}: {loc}: {err['msg']}")
    return "\n".join(lines)


def parse_workload(data: Any, where: str) -> Workload:
    """Validate already-loaded YAML/JSON data; ``where`` names the source in errors."""
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise WorkloadError(f"{where}: a workload is a mapping of fields, got {kind}")
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(_format_errors(exc, where)) from None


def load_workload(name_or_path: str) -> tuple[Workload, Path | None]:
    """A built-in workload by name, or a YAML file by path.

    Returns the workload and the directory relative trace paths resolve against.
    """
    path = Path(name_or_path)
    if path.suffix in {".yaml", ".yml", ".json"} or path.exists():
        if not path.is_file():
            raise WorkloadError(f"workload file {path} does not exist")
        text = path.read_text(encoding="utf-8")
        base: Path | None = path.resolve().parent
        where = str(path)
    else:
        resource = resources.files(_PACKAGE).joinpath("workloads").joinpath(f"{name_or_path}.yaml")
        if not resource.is_file():
            valid = ", ".join(builtin_workloads())
            raise WorkloadError(
                f"unknown workload {name_or_path!r}: not a built-in ({valid}) nor a YAML file"
            )
        text = resource.read_text(encoding="utf-8")
        base, where = None, f"{name_or_path}.yaml (built-in)"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{where}: not valid YAML: {exc}") from None
    return parse_workload(data, where), base
