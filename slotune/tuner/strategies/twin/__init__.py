"""The twin: the simulator, calibrated during the sweep from the real engine's measurements.

One home for it: the model that predicts any configuration (:mod:`.model`, with the
factors it learns in :mod:`.factors`) and the strategy that boots the real engine only
where the model cannot rule a configuration out (:mod:`.strategy`). What a twin sweep
stores and how a later sweep starts from it is the sweep's
(``slotune/tuner/sweep/calibrations.py``).
"""

from __future__ import annotations

from slotune.tuner.strategies.twin.factors import TwinFactors
from slotune.tuner.strategies.twin.model import Twin, TwinUnavailable
from slotune.tuner.strategies.twin.strategy import MAX_CANDIDATES, TwinCall, TwinStrategy

__all__ = ["MAX_CANDIDATES", "Twin", "TwinCall", "TwinFactors", "TwinStrategy",
           "TwinUnavailable"]
