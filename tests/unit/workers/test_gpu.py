"""GPU probing: NVML when there is a GPU; a clear "unavailable" and no checks without."""

from __future__ import annotations

import pytest

from slotune.workers.gpu import GPUProbe

PROBE = GPUProbe()


@pytest.mark.gpu
@pytest.mark.skipif(not PROBE.available, reason=f"needs a GPU with NVML: {PROBE.reason}")
def test_nvml_reports_real_gpus() -> None:
    gpus = PROBE.gpus()
    assert gpus and all(g.memory_total > g.memory_free >= 0 for g in gpus)
    assert all(g.name for g in gpus)
    assert isinstance(PROBE.busy([str(gpus[0].index)]), list)
    driver = PROBE.driver_version()
    assert driver and driver[0].isdigit()  # e.g. "550.54.15"


def test_without_nvml_the_probe_says_so_and_checks_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def fail() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    probe = GPUProbe()
    assert not probe.available
    assert probe.reason.startswith("NVML unavailable")
    assert probe.gpus(["0"]) == [] and probe.busy(["0"]) == []
    assert probe.driver_version() is None
