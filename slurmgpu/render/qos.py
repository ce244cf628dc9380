"""The QOS plan: the sacctmgr commands and slurm.conf settings a policy needs (pure).

Slurm applies a QOS's PreemptMode and GraceTime to the jobs *of that QOS* when they are
preempted (the victim's QOS, not the preemptor's). The policy states them on the preempting
tier ("P0 preempts P2 with 120 s grace, requeue"), so they are rendered onto the QOS of each
tier that is preempted.

The grace of a *requeued* tier is not Slurm's GraceTime but `KillWait`: with GraceTime > 0,
22.05 SIGTERMs the job's srun steps at the start of the grace and requeues only if the job
is still running when the grace ends; a step that exits on SIGTERM lets the batch script end
COMPLETED or FAILED, never requeued, and the end of the grace is noticed only by a later
scheduling pass (up to ~30 s late). With GraceTime=0 slurmctld requeues the job first
(`slurm_job_preempt` -> `job_requeue`) and then kills it: every process gets SIGTERM and
KillWait seconds before SIGKILL, and nothing the job does can end it un-requeued. So a
requeued tier gets GraceTime=0 and slurm.conf `KillWait` >= its grace (docs/policy.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmgpu.model.accounts import Association, QosRecord
from slurmgpu.model.policy import Policy, Tier

# The Description slurmgpu gives a tier QOS: marks it as ours (only ours are ever deleted).
# slurmdbd stores descriptions lowercased (seen with 22.05), so it is written lowercase.
OWNER_PREFIX = "slurmgpu tier "


@dataclass(frozen=True)
class Setting:
    """A slurm.conf setting the policy needs, and how to tell the live value agrees."""

    key: str
    value: str
    why: str

    def agrees(self, live: str | None) -> bool:
        if live is None:
            return False
        have, want = live.strip().lower(), self.value.lower()
        if self.key == "JobSubmitPlugins":
            return "lua" in have
        if self.key == "AccountingStorageEnforce":
            return all(w in have for w in ("associations", "qos"))
        if self.key == "PreemptMode":
            return want.split(",")[0] in have.split(",")
        if self.key == "KillWait":  # `scontrol show config` says `30 sec`
            number = have.split()[0] if have else ""
            return number.isdigit() and int(number) >= int(want)
        return have == want


@dataclass(frozen=True)
class QosPlan:
    """What `slurmgpu qos plan` prints and `qos apply` runs."""

    commands: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...]
    settings: tuple[Setting, ...]
    warnings: tuple[str, ...]

    @property
    def nothing_to_do(self) -> bool:
        return not self.commands


def desired_qos(policy: Policy) -> list[QosRecord]:
    """One QOS per tier, in an order where every preempted QOS comes before its preemptors."""
    records = {}
    for tier in policy.tiers:
        by = policy.preemptors(tier)
        records[tier.name] = QosRecord(
            name=tier.qos.lower(),
            priority=tier.priority,
            preempt=policy.preempt_qos(tier),
            preempt_mode=by[0].preempt_mode if by else "cluster",
            # a requeued tier's grace is KillWait (module docstring)
            grace_time_s=0
            if policy.requeued_when_preempted(tier)
            else max((t.grace_time_s for t in by), default=0),
            max_tres_per_user=_gpu_tres(tier.max_gpus_per_user),
            max_tres_per_account=_gpu_tres(tier.max_gpus_per_account),
            description=(OWNER_PREFIX + tier.name).lower(),
        )
    ordered: list[QosRecord] = []
    done: set[str] = set()

    def place(tier: Tier) -> None:
        if tier.name in done:
            return
        done.add(tier.name)
        for victim in tier.preempts:
            place(policy.tier(victim))  # type: ignore[arg-type]
        ordered.append(records[tier.name])

    for tier in policy.tiers:
        place(tier)
    return ordered


def _gpu_tres(count: int | None) -> str:
    return f"gres/gpu={count}" if count else ""


def _settings_of(want: QosRecord, have: QosRecord | None) -> list[str]:
    """`Key=value` arguments for what differs (all of them when `have` is None)."""
    out = []
    if have is None or have.priority != want.priority:
        out.append(f"Priority={want.priority}")
    # A new QOS gets only what differs from sacctmgr's defaults.
    if want.preempt if have is None else have.preempt != want.preempt:
        out.append("Preempt=" + ",".join(want.preempt))
    if want.preempt_mode != "cluster" if have is None else have.preempt_mode != want.preempt_mode:
        out.append(f"PreemptMode={want.preempt_mode}")
    if want.grace_time_s if have is None else have.grace_time_s != want.grace_time_s:
        out.append(f"GraceTime={want.grace_time_s}")
    for key, w, h in (
        ("MaxTRESPerUser", want.max_tres_per_user, have.max_tres_per_user if have else ""),
        ("MaxTRESPerAccount", want.max_tres_per_account, have.max_tres_per_account if have else ""),
    ):
        if _tres(w) != _tres(h):
            # sacctmgr clears one TRES limit with -1
            out.append(f"{key}={w or 'gres/gpu=-1'}")
    if have is None or have.description.lower() != want.description:
        out.append(f"Description={want.description}")
    return out


def _tres(text: str) -> str:
    return ",".join(sorted(p for p in text.lower().split(",") if p))


def plan_qos(
    policy: Policy,
    live: Iterable[QosRecord],
    *,
    in_use: Iterable[str] = (),
    prune: bool = False,
) -> tuple[list[tuple[str, ...]], list[str]]:
    """(sacctmgr argument lists, notes) that bring the QOS to the policy.

    Stale QOS are deleted only when slurmgpu owns them (Description) and, unless `prune`,
    no pending or running job uses them. QOS the policy never made are left alone.
    """
    live_by_name = {q.name.lower(): q for q in live}
    used = {n.lower() for n in in_use}
    adds: list[tuple[str, ...]] = []
    modifies: list[tuple[str, ...]] = []
    notes: list[str] = []
    wanted = desired_qos(policy)
    for want in wanted:
        have = live_by_name.get(want.name)
        if have is None:
            adds.append(("add", "qos", want.name, *_settings_of(want, None)))
            continue
        changes = _settings_of(want, have)
        if changes:
            modifies.append(("modify", "qos", "where", f"name={want.name}", "set", *changes))
    wanted_names = {w.name for w in wanted}
    deletes: list[tuple[str, ...]] = []
    for name, have in sorted(live_by_name.items()):
        if name in wanted_names or not have.description.lower().startswith(OWNER_PREFIX):
            continue
        if name in used and not prune:
            notes.append(
                f"QOS {name} ({have.description}) is no longer in the policy but jobs use it: "
                "kept (--prune deletes it)"
            )
            continue
        # Nothing may still preempt a QOS that is going away.
        deletes.append(("delete", "qos", "where", f"name={name}"))
    return adds + modifies + deletes, notes


def plan_associations(policy: Policy, assocs: Iterable[Association]) -> list[tuple[str, ...]]:
    """`qos+=` / `qos-=` for each association whose tier QOS differ from what the policy allows.

    Account associations (what new users of the account inherit) come first, then users.
    """
    managed = {t.qos.lower() for t in policy.tiers}
    account_cmds: list[tuple[str, ...]] = []
    user_cmds: list[tuple[str, ...]] = []
    for a in sorted(assocs, key=lambda a: (a.cluster, a.account, a.user or "")):
        allowed = {t.qos.lower() for t in policy.tiers if t.allows(a.user, a.account)}
        have = {q.lower() for q in a.qos} & managed
        if a.user is None:
            where = ("modify", "account", "where", f"name={a.account}", f"cluster={a.cluster}")
            target = account_cmds
        else:
            where = (
                "modify",
                "user",
                "where",
                f"name={a.user}",
                f"account={a.account}",
                f"cluster={a.cluster}",
            )
            target = user_cmds
        if allowed - have:
            target.append((*where, "set", "qos+=" + ",".join(sorted(allowed - have))))
        if have - allowed:
            target.append((*where, "set", "qos-=" + ",".join(sorted(have - allowed))))
    return account_cmds + user_cmds


def required_settings(policy: Policy) -> list[Setting]:
    """The slurm.conf settings the tiers rely on."""
    victims = [q for q in desired_qos(policy) if q.preempt_mode != "cluster"]
    modes = {q.preempt_mode for q in victims}
    if "suspend" in modes:
        cluster_mode = "SUSPEND,GANG"  # Slurm requires GANG with SUSPEND
    elif modes == {"cancel"}:
        cluster_mode = "CANCEL"
    else:
        cluster_mode = "REQUEUE"
    settings = [
        Setting("PreemptType", "preempt/qos", "tiers preempt by QOS"),
        Setting("PreemptMode", cluster_mode, "not OFF; each tier QOS sets its own mode"),
        Setting("PriorityType", "priority/multifactor", "QOS priority counts only here"),
        Setting(
            "PriorityWeightQOS",
            str(policy.priority_weight_qos),
            "weight of the tier QOS priority (the policy's priority_weight_qos)",
        ),
        Setting("JobSubmitPlugins", "lua", "job_submit.lua routes tiers and job kinds"),
        Setting(
            "AccountingStorageEnforce",
            "associations,limits,qos",
            "only associations allowed a tier QOS may use it; QOS GPU limits",
        ),
    ]
    if "requeue" in modes or cluster_mode == "REQUEUE":
        settings.append(Setting("JobRequeue", "1", "preempted jobs are requeued, not lost"))
    grace = requeue_grace_s(policy)
    if grace:
        settings.append(
            Setting(
                "KillWait",
                str(grace),
                "at least: the grace a preempted, requeued job gets between SIGTERM and "
                "SIGKILL (its QOS has GraceTime=0); also what a job gets at its time limit",
            )
        )
    return settings


def requeue_grace_s(policy: Policy) -> int:
    """The longest grace of a tier preempting with requeue: the KillWait the cluster needs."""
    return max(
        (t.grace_time_s for t in policy.tiers if t.preempts and t.preempt_mode == "requeue"),
        default=0,
    )


def config_warnings(settings: Iterable[Setting], live: Mapping[str, str]) -> list[str]:
    """One line per setting the live `scontrol show config` disagrees with."""
    out = []
    for s in settings:
        have = live.get(s.key)
        if not s.agrees(have):
            out.append(
                f"slurm.conf has {s.key}={have if have is not None else '(unset)'}, "
                f"the policy needs {s.key}={s.value} ({s.why})"
            )
    return out


def unknown_members(policy: Policy, assocs: Iterable[Association]) -> list[str]:
    """One line per account or user a tier names that has no association in slurmdbd (on
    this cluster): a typo, or one not created yet; no job can reach the tier through it."""
    assocs = list(assocs)
    accounts = {a.account.lower() for a in assocs}
    users = {a.user for a in assocs if a.user}
    clusters = sorted({a.cluster for a in assocs if a.cluster})
    where = f" on cluster {', '.join(clusters)}" if clusters else ""
    out = []
    for t in policy.tiers:
        for account in t.accounts:
            if account.lower() not in accounts:
                out.append(
                    f"tier {t.name} names account {account}, which slurmdbd does not know"
                    f"{where}: no job reaches the tier through it (a typo, or "
                    f"`sacctmgr add account {account}` first)"
                )
        for user in t.users:
            if user not in users:
                out.append(
                    f"tier {t.name} names user {user}, who has no association in slurmdbd"
                    f"{where}: the user cannot run jobs in any tier yet (a typo, or "
                    f"`sacctmgr add user {user} account=...` first)"
                )
    return out


def build_plan(
    policy: Policy,
    live_qos: Iterable[QosRecord],
    assocs: Iterable[Association],
    live_config: Mapping[str, str],
    *,
    in_use: Iterable[str] = (),
    prune: bool = False,
) -> QosPlan:
    """Everything `qos plan` reports, from the policy and what Slurm holds now."""
    assocs = list(assocs)
    qos_cmds, notes = plan_qos(policy, live_qos, in_use=in_use, prune=prune)
    assoc_cmds = plan_associations(policy, assocs)
    deletes = [c for c in qos_cmds if c[0] == "delete"]
    others = [c for c in qos_cmds if c[0] != "delete"]
    settings = required_settings(policy)
    return QosPlan(
        commands=tuple(others + assoc_cmds + deletes),
        notes=tuple(notes),
        settings=tuple(settings),
        warnings=tuple(unknown_members(policy, assocs) + config_warnings(settings, live_config)),
    )


def format_command(args: Iterable[str]) -> str:
    """A shell-quoted `sacctmgr -i ...` line for display (apply runs the argument list)."""
    return shlex.join(["sacctmgr", "-i", *args])
