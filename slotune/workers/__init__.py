"""slotune's data plane: contracts, engine launchers, load generator, scorer, simulated engine.

This package stands alone: it never imports ``tuner``.
"""
