"""Where the tests find the repository's own files, wherever the test module sits."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository's root (``search_spaces/``, ``benchmarks/``, ``deploy/``, ``scripts/``)."""
FIXTURES = REPO / "tests" / "fixtures"
"""The tests' data files (``tests/fixtures/``)."""
