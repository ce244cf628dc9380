"""Decisions proven by the replay: calibration, the objective, the optimizer (`slurmgpu advise`)."""
