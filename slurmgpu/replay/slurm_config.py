"""The scheduler settings a replay honours, read from slurm.conf text or `scontrol show config`.

slurm.conf writes durations in minutes or as `D-HH:MM:SS`; `scontrol show config` prints
`HH:MM:SS` or `D-HH:MM:SS`. Both are read here, so a replay can use the site's own settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from slurmgpu.errors import UsageError
from slurmgpu.replay.engine import SchedConfig
from slurmgpu.util import numbers

# ASCII digits only (`\d`, isdigit() and int() take `٣`; isdigit() takes `²`, issue #33)
_DURATION = re.compile(r"(?:(?P<d>[0-9]{1,6})-)?(?P<rest>[0-9:]{1,20})")


def slurm_minutes(text: str, key: str) -> int:
    """A Slurm duration (`5`, `7-0`, `00:05:00`, `7-00:00:00`) in seconds; bare numbers are
    minutes as in slurm.conf."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise UsageError(f"{key}={text!r}: not a Slurm time (minutes, or D-HH:MM:SS)")
    days = int(m.group("d") or 0)
    parts = [int(x) for x in m.group("rest").split(":") if x != ""]
    if len(parts) == 1:  # minutes (or hours after a day: 7-0 is 7 days 0 hours)
        secs = parts[0] * (3600 if m.group("d") else 60)
    elif len(parts) == 2:
        secs = parts[0] * (3600 if m.group("d") else 60) + parts[1] * (60 if m.group("d") else 1)
    else:
        secs = parts[-3] * 3600 + parts[-2] * 60 + parts[-1]
    return days * 86400 + secs


def parse_slurm_conf(text: str) -> dict[str, str]:
    """slurm.conf (or `scontrol show config`) text -> {Key: value} (comments dropped)."""
    out: dict[str, str] = {}
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark: not part of the first key
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def sched_config(settings: Mapping[str, str], base: SchedConfig | None = None) -> SchedConfig:
    """SchedConfig from slurm.conf keys (PriorityWeightQOS/Age, PriorityMaxAge,
    PriorityCalcPeriod, SchedulerParameters bf_interval/bf_max_job_test/bf_window/defer,
    AuthInfo cred_expire)."""
    cfg = base or SchedConfig()
    lower = {k.lower(): v for k, v in settings.items()}

    def integer(key: str) -> int | None:
        value = lower.get(key.lower())
        if value is None:
            return None
        if not numbers.is_ascii_digits(value.strip()):
            raise UsageError(f"{key}={value!r}: not a whole number")
        return int(value)

    changes: dict[str, object] = {}
    for key, attr in (
        ("PriorityWeightQOS", "priority_weight_qos"),
        ("PriorityWeightAge", "priority_weight_age"),
    ):
        if (v := integer(key)) is not None:
            changes[attr] = v
    if (v := lower.get("prioritymaxage")) is not None:
        changes["priority_max_age_s"] = max(slurm_minutes(v, "PriorityMaxAge"), 1)
    if (v := lower.get("prioritycalcperiod")) is not None:
        changes["priority_calc_period_s"] = max(slurm_minutes(v, "PriorityCalcPeriod"), 1)
    if (v := lower.get("schedulertype")) is not None:
        changes["backfill"] = v.strip() == "sched/backfill"
    if (v := _requeue_delay_s(lower.get("authinfo", ""))) is not None:
        changes["requeue_delay_s"] = v
    for item in lower.get("schedulerparameters", "").split(","):
        key, _, value = item.strip().partition("=")
        if key == "defer":  # a job's end no longer runs the main scheduler at once
            changes["sched_on_end"] = False
        whole = numbers.is_ascii_digits(value)
        if key in ("bf_interval", "bf_max_job_test", "bf_window") and not whole:
            raise UsageError(f"SchedulerParameters {item!r}: not a whole number")
        if key == "bf_interval":
            changes["bf_interval_s"] = max(int(value), 1)
        elif key == "bf_max_job_test":
            changes["bf_max_job_test"] = max(int(value), 1)
        elif key == "bf_window":
            changes["bf_window_s"] = int(value) * 60
    return replace(cfg, **changes)  # type: ignore[arg-type]


def _requeue_delay_s(authinfo: str) -> int | None:
    """How long a requeued job waits before it may start again: `AuthInfo=cred_expire=N`
    plus one second (Slurm's default 120 s: the model's default 121): slurmctld holds a
    requeued batch job until the credentials of its killed run have expired (seen on 22.05
    with cred_expire=20: sacct's Eligible of a preempted job's next run is its Submit, the
    preemption, + 21 s)."""
    for item in authinfo.split(","):
        key, _, value = item.strip().partition("=")
        if key.strip().lower() == "cred_expire":
            if not numbers.is_ascii_digits(value.strip()):
                raise UsageError(f"AuthInfo cred_expire={value!r}: not a whole number")
            return int(value) + 1
    return None
