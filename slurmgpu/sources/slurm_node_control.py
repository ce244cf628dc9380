"""Changing one Slurm node's state for a re-layout: drain, jobs, requeue, reconfigure, resume.

Every call is `scontrol`/`squeue` through `util.proc.run` (argument lists, timeouts); `env`
carries SLURM_CONF for a test cluster. `mig apply` only talks to Slurm through this class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmgpu.sources.slurm import parse_scontrol_record
from slurmgpu.util.proc import run


@dataclass(frozen=True)
class NodeJob:
    """A job with a step on the node: its id and QOS (the tier policy's key)."""

    job_id: str
    qos: str


class SlurmNodeControl:
    """scontrol/squeue for one node's maintenance (drain -> ... -> resume)."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
        self.env = dict(env) if env else None
        self.timeout = timeout

    def _run(self, argv: Sequence[str]) -> str:
        return run(argv, env=self.env, timeout=self.timeout).stdout

    def drain(self, node: str, reason: str) -> None:
        self._run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        self._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def jobs_on(self, node: str) -> list[NodeJob]:
        out = self._run(["squeue", "-h", "-w", node, "-t", "RUNNING,COMPLETING", "-o", "%i %q"])
        jobs = []
        for line in out.splitlines():
            parts = line.split()
            if parts:
                jobs.append(NodeJob(parts[0], parts[1] if len(parts) > 1 else ""))
        return jobs

    def requeue(self, job_id: str) -> None:
        self._run(["scontrol", "requeue", job_id])

    def reconfigure(self) -> None:
        self._run(["scontrol", "reconfigure"])

    def gres_types(self) -> str:
        """The controller's GresTypes (`scontrol show config`)."""
        from slurmgpu.sources.slurm import scontrol_show_config

        return scontrol_show_config(self.env).get("GresTypes", "")

    def config_value(self, key: str) -> str:
        """One setting of the controller's `scontrol show config` ("" when absent)."""
        from slurmgpu.sources.slurm import scontrol_show_config

        return scontrol_show_config(self.env).get(key, "")

    def node_record(self, node: str) -> dict[str, str]:
        out = self._run(["scontrol", "show", "-o", "node", node])
        line = next((x for x in out.splitlines() if x.strip()), "")
        return parse_scontrol_record(line)

    def run_command(self, argv: Sequence[str], timeout: float = 120.0) -> None:
        """A site command (stop/start slurmd, mig-parted); fails with its stderr."""
        run(argv, env=self.env, timeout=timeout)
