"""The measurement harness: the runner, its sampling, telemetry and L2 modes, GPU turns, host load,
provenance, and the cold-run, preflight and ceilings tools."""
