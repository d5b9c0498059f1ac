"""Sizes of modules and their classes: lines, methods and instance attributes.

For watching the big classes (issue 39, item 5) stay split along their seams::

    python scripts/class_sizes.py slotune/tuner/db/store.py slotune/workers/sim/core.py ...

A module's lines are its physical lines; a class's, the span of its ``class`` statement;
its methods are the functions defined in its body (properties included); its attributes
the distinct ``self.x`` names assigned in any method, plus class-level annotated names.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _attributes(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                        and sub.value.id == "self":
                    names.add(sub.attr)
    return names


def report(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    functions = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in tree.body)
    lines = [f"{path}\t{len(path.read_text().splitlines())} lines\t{functions} functions"]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods = [n for n in node.body
                       if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            lines.append(f"  class {node.name}\t{span} lines\t{len(methods)} methods\t"
                         f"{len(_attributes(node))} attributes")
    return lines


def main(argv: list[str]) -> None:
    for name in argv:
        print("\n".join(report(Path(name))))


if __name__ == "__main__":
    main(sys.argv[1:])
