"""slurmdbd through `sacctmgr`: the QOS and associations, parsed from `--parsable2` output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurmgpu.errors import SlurmCommandError
from slurmgpu.model.accounts import Association, QosRecord
from slurmgpu.util.proc import run

QOS_FORMAT = (
    "Name",
    "Priority",
    "Preempt",
    "PreemptMode",
    "GraceTime",
    "MaxTRESPU",
    "MaxTRESPA",
    "Description",
)
ASSOC_FORMAT = ("Cluster", "Account", "User", "QOS")


def parse_duration_s(text: str) -> int:
    """Slurm's `[D-]HH:MM:SS` / `MM:SS` (as sacctmgr prints GraceTime) -> seconds."""
    text = text.strip()
    if not text:
        return 0
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return ((days * 24 + h) * 60 + m) * 60 + s


def _names(text: str) -> tuple[str, ...]:
    return tuple(sorted(n for n in text.strip().split(",") if n))


def parse_qos_lines(text: str) -> list[QosRecord]:
    """`sacctmgr show qos --parsable2 --noheader format=<QOS_FORMAT>` -> records."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < len(QOS_FORMAT):
            raise SlurmCommandError(f"sacctmgr show qos: unexpected line {line!r}")
        # Description is last and free text: re-join anything a '|' in it split off.
        name, prio, preempt, mode, grace, mtpu, mtpa = fields[:7]
        records.append(
            QosRecord(
                name=name,
                priority=int(prio or 0),
                preempt=_names(preempt),
                preempt_mode=(mode or "cluster").lower(),
                grace_time_s=parse_duration_s(grace),
                max_tres_per_user=mtpu,
                max_tres_per_account=mtpa,
                description="|".join(fields[7:]),
            )
        )
    return records


def parse_assoc_lines(text: str) -> list[Association]:
    """`sacctmgr show assoc --parsable2 --noheader format=<ASSOC_FORMAT>` -> associations."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != len(ASSOC_FORMAT):
            raise SlurmCommandError(f"sacctmgr show assoc: unexpected line {line!r}")
        cluster, account, user, qos = fields
        out.append(Association(cluster, account, user or None, _names(qos)))
    return out


def show_qos(env: Mapping[str, str] | None = None) -> list[QosRecord]:
    """Every QOS slurmdbd knows."""
    argv = ["sacctmgr", "show", "qos", "--parsable2", "--noheader"]
    out = run([*argv, "format=" + ",".join(QOS_FORMAT)], env=env, timeout=60).stdout
    return parse_qos_lines(out)


def show_associations(cluster: str, env: Mapping[str, str] | None = None) -> list[Association]:
    """The associations of `cluster`."""
    argv = ["sacctmgr", "show", "assoc", "--parsable2", "--noheader", "where", f"cluster={cluster}"]
    out = run([*argv, "format=" + ",".join(ASSOC_FORMAT)], env=env, timeout=60).stdout
    return parse_assoc_lines(out)


def qos_in_use(names: Sequence[str], env: Mapping[str, str] | None = None) -> set[str]:
    """Which of `names` pending or running jobs use (`squeue -q`)."""
    if not names:
        return set()
    argv = ["squeue", "-h", "-t", "all", "-q", ",".join(names), "-o", "%q"]
    out = run(argv, env=env, timeout=60).stdout
    return {line.strip().lower() for line in out.splitlines() if line.strip()}


def run_sacctmgr(args: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """`sacctmgr -i ARGS` (no confirmation prompt); raises with sacctmgr's message."""
    return run(["sacctmgr", "-i", *args], env=env, timeout=120).stdout
