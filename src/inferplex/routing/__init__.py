"""Routes: one name answered by other models (A/B and canary splits, sticky keys, shadow
mirroring, graceful degradation to faster variants)."""
