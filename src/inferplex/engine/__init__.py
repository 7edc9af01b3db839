"""The engine: the one facade every frontend calls (``inference.InferenceEngine``), above
the core it drives and the lifecycle, routing and guards it is handed by the composition
root (``inferplex.server.build_engine``)."""
