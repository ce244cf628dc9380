"""`slurmgpu autopilot`: one pass of forecast -> advise -> guardrails -> act -> record, the
next pass verifying the last change (docs/autopilot.md)."""

from slurmgpu.autopilot.run import (
    DEFAULT_STATE_DIR,
    AutopilotOptions,
    PassResult,
    approve,
    autopilot,
)

__all__ = ["DEFAULT_STATE_DIR", "AutopilotOptions", "PassResult", "approve", "autopilot"]
