"""The twin: the simulator, calibrated during the sweep from the real engine's measurements."""
