"""slotune's control plane: search spaces, study coordination, persistence and surfaces."""
