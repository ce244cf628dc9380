"""What slurmdbd holds about QOS and associations, as slurmgpu reads it (pure data)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QosRecord:
    """One row of `sacctmgr show qos` (the fields slurmgpu manages)."""

    name: str
    priority: int = 0
    preempt: tuple[str, ...] = ()
    preempt_mode: str = "cluster"
    grace_time_s: int = 0
    max_tres_per_user: str = ""
    max_tres_per_account: str = ""
    description: str = ""


@dataclass(frozen=True)
class Association:
    """One row of `sacctmgr show assoc`: an account's (user is None) or a user's association."""

    cluster: str
    account: str
    user: str | None
    qos: tuple[str, ...] = ()
