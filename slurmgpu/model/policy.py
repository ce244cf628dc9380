"""The site policy: priority tiers (QOS + preemption), job kinds (GPU slices), partitions.

Pure data, no I/O: `slurmgpu.sources.policy_file` builds a `Policy` from TOML and validates
it; renderers (QOS plan, job_submit.lua) and the wrapper only read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurmgpu.model.catalog import GPU_MODELS, GpuModel, MigProfile, model_for_type

SLICE_MIG = "mig"
SLICE_SHARD = "shard"
SLICE_GPU = "gpu"
SLICE_KINDS = (SLICE_MIG, SLICE_SHARD, SLICE_GPU)

# Slurm's per-QOS PreemptMode values that make sense for a preempting tier (sacctmgr words).
PREEMPT_MODES = ("requeue", "cancel", "suspend")

# Tier/kind tags in a job's --comment: the contract shared by the wrapper, job_submit.lua and
# the accounting analysis (keep in sync with the Lua template's pattern).
TAG_PATTERN = r"(?:^|[\s;,])(tier|kind)=([A-Za-z0-9_.-]+)"


@dataclass(frozen=True)
class Slice:
    """A GPU request a job kind gets: one MIG instance, N shards of a GPU, or N whole GPUs.

    `gres_type` is the Slurm GRES type name (`3g.40gb`, `nvidia_h100_80gb_hbm3_3g.40gb`,
    `h100`) or None for an untyped request (`gpu:2`, `shard:2`).
    """

    kind: str
    count: int = 1
    mig_profile: str | None = None
    gres_type: str | None = None
    gpu_model: str | None = None  # catalogue key, when known

    @property
    def gres(self) -> str:
        """The request as `--gres` takes it: `gpu:TYPE:1`, `shard:2`, `gpu:h100:8`."""
        name = SLICE_SHARD if self.kind == SLICE_SHARD else "gpu"
        if self.gres_type:
            return f"{name}:{self.gres_type}:{self.count}"
        return f"{name}:{self.count}"

    def describe(self) -> str:
        if self.kind == SLICE_MIG:
            return f"MIG {self.mig_profile}"
        if self.kind == SLICE_SHARD:
            return f"{self.count} shard(s)"
        return f"{self.count} whole GPU(s)"


@dataclass(frozen=True)
class Tier:
    """A priority tier (P0, P1, P2) realised as one Slurm QOS."""

    name: str
    qos: str
    priority: int
    preempts: tuple[str, ...] = ()
    grace_time_s: int = 0
    preempt_mode: str = "requeue"
    max_gpus_per_user: int | None = None
    max_gpus_per_account: int | None = None
    accounts: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    description: str = ""

    @property
    def restricted(self) -> bool:
        """True when only the listed accounts/users may use this tier."""
        return bool(self.accounts or self.users)

    def allows(self, user: str | None, account: str | None) -> bool:
        """Whether `user` (or a job under `account`) may use this tier.

        Accounts compare case-insensitively: Slurm stores account names lowercased and
        accepts `-A PROD` for `prod`.
        """
        if not self.restricted:
            return True
        if account is not None and account.lower() in {a.lower() for a in self.accounts}:
            return True
        return user is not None and user in self.users


@dataclass(frozen=True)
class JobKind:
    """A kind of job (inference, finetune, training) and what it gets by default."""

    name: str
    slice: Slice
    partition: str | None = None
    time_limit_min: int | None = None
    description: str = ""
    # accelerator classes (slurmgpu.model.accel.CLASSES) `submit --accel` may route this kind
    # to, e.g. inference: npu, gpu-slice; training: linked-gpu (empty: any)
    accel: tuple[str, ...] = ()


@dataclass(frozen=True)
class Partition:
    """A Slurm partition the policy routes jobs to."""

    name: str
    description: str = ""


IDLE_ACTIONS = ("cancel", "requeue", "notify")
# rule keys an `[idle.tiers.X]` / `[idle.partitions.X]` override may set
IDLE_RULE_KEYS = ("window_min", "util_pct", "warn_after_min", "action", "memory_held_mib")


@dataclass(frozen=True)
class IdleRule:
    """When a job counts as idle and what happens then (docs/idle.md "The rule").

    A job is idle at time t when t - start >= `window_min` and every utilization sample of
    every GPU or MIG instance it holds in [t - window, t] is <= `util_pct`. With
    `memory_held_mib`, a device also needs every memory sample in the window >= that much
    ("memory held, 0% compute"). `warn_after_min` are the same test with shorter windows.
    """

    window_min: float = 120.0
    util_pct: float = 1.0
    warn_after_min: tuple[float, ...] = (60.0, 105.0)
    action: str = "cancel"
    memory_held_mib: float | None = None

    @property
    def window_s(self) -> float:
        return self.window_min * 60.0


@dataclass(frozen=True)
class IdlePolicy:
    """The `[idle]` table: the default rule, who is exempt, per-tier/partition overrides.

    `max_gap_s`: a stretch without a sample longer than this (inside the window, or from its
    edges to the nearest sample) means "not known", never "idle". `exempt_reasons`: the
    reasons a user may give in `--comment idle-exempt=REASON`; empty = users cannot exempt.
    `max_actions_per_run`: the live mode's rate limit.
    """

    rule: IdleRule = IdleRule()
    exempt_tiers: tuple[str, ...] = ()
    exempt_interactive: bool = True
    exempt_users: tuple[str, ...] = ()
    exempt_accounts: tuple[str, ...] = ()
    exempt_partitions: tuple[str, ...] = ()
    exempt_reasons: tuple[str, ...] = ()
    max_gap_s: float = 300.0
    max_actions_per_run: int = 10
    min_notice_min: float = 15.0
    tiers: tuple[tuple[str, IdleRule], ...] = ()
    partitions: tuple[tuple[str, IdleRule], ...] = ()
    mail_from: str = ""
    mail_domain: str = ""
    admin_mail: tuple[str, ...] = ()

    def rule_for(self, tier: str | None, partition: str | None) -> IdleRule:
        """The rule a job runs under: a partition override, else its tier's, else the default."""
        for name, rule in self.partitions:
            if partition and name == partition:
                return rule
        for name, rule in self.tiers:
            if tier and name == tier:
                return rule
        return self.rule


@dataclass(frozen=True)
class WaitWeight:
    """How much a tier's or a partition's waits count in `advise`'s score (`[objective]`)."""

    name: str
    mean_wait: float = 0.0
    p95_wait: float = 0.0
    # this partition's own limit on wait growth (None: the objective's max_wait_growth)
    max_wait_growth: float | None = None


@dataclass(frozen=True)
class Objective:
    """The site's objective for `slurmgpu advise` (`[objective]`, docs/policy.md).

    A plan is scored by the weighted relative change of each group's mean and p95 wait
    (lower is better); it is refused when any partition's mean or p95 wait grows more than
    `max_wait_growth` (a share) and `max_wait_growth_s` (seconds) together allow, when the
    top tier's p95 wait passes `p0_max_wait_s`, or when the useful GPU-hours fall below
    `min_useful_gpu_hours` of the baseline's.
    """

    tiers: tuple[WaitWeight, ...] = ()
    partitions: tuple[WaitWeight, ...] = ()
    default_mean_wait: float = 1.0  # a partition with no weight of its own
    default_p95_wait: float = 0.0
    max_wait_growth: float = 0.10
    max_wait_growth_s: float = 60.0
    p0_max_wait_s: float | None = None
    min_useful_gpu_hours: float = 0.99
    calibration_wait_factor: float = 2.0
    calibration_allocation_points: float = 5.0
    uncertainty_replays: int = 4
    perturb_duration: float = 0.10  # durations x lognormal(0, this), capped at the limit
    perturb_submit_s: float = 300.0  # submits + normal(0, this)

    def partition(self, name: str) -> WaitWeight:
        own = next((w for w in self.partitions if w.name == name), None)
        return own or WaitWeight(name, self.default_mean_wait, self.default_p95_wait)

    def growth_limit(self, name: str) -> float:
        own = next((w for w in self.partitions if w.name == name), None)
        return (
            own.max_wait_growth
            if own and own.max_wait_growth is not None
            else (self.max_wait_growth)
        )


@dataclass(frozen=True)
class AutopilotPolicy:
    """The guardrails of `slurmgpu autopilot` (`[autopilot]`, docs/autopilot.md).

    A pass acts on at most `max_nodes_per_pass` nodes, and on at most `max_nodes_per_day` in
    any 24 hours; only in the hours `allowed_hours` ([start, end) of the controller's local
    clock, end < start wraps midnight); never on a node running a job of the top tier, of a
    tier no other tier preempts, or of `protect_tiers`; only when the replayed score falls by
    at least `min_gain` and the worst perturbed replay still shows no partition's mean wait
    growing; never on a node changed less than `cooldown_h` ago; never while the file
    `kill_switch` exists. A change is judged `verify_after_min` after it was made: when a
    partition it touched waits longer than before by more than `rollback_tolerance` (a
    share) and `rollback_slack_s` together, it is undone.
    """

    mode: str = "propose"  # propose | apply (the command line's --mode wins)
    max_nodes_per_pass: int = 1
    max_nodes_per_day: int = 4
    allowed_hours: tuple[int, int] = (0, 24)
    min_gain: float = 0.05
    cooldown_h: float = 6.0
    kill_switch: str = "/etc/slurmgpu/autopilot.disable"
    protect_tiers: tuple[str, ...] = ()
    verify_after_min: float = 30.0
    rollback_tolerance: float = 0.25
    rollback_slack_s: float = 60.0

    def hour_allowed(self, hour: int) -> bool:
        start, end = self.allowed_hours
        if start == end or (start, end) == (0, 24):
            return True
        if start < end:
            return start <= hour < end
        return hour >= start or hour < end


@dataclass(frozen=True)
class EnergyPolicy:
    """The `[energy]` table: what a kWh costs the site (docs/energy.md).

    `pue`: the facility's power usage effectiveness (facility energy / IT energy, >= 1): the
    GPUs' kWh times it is what the site pays for. `price_per_kwh` in `currency`;
    `gco2_per_kwh`: grams of CO2 per kWh of the site's electricity. None: not given (the
    report then shows no money or CO2 for it).
    """

    pue: float = 1.0
    price_per_kwh: float | None = None
    currency: str = ""
    gco2_per_kwh: float | None = None

    def facility_kwh(self, kwh: float) -> float:
        return kwh * self.pue

    def cost(self, kwh: float) -> float | None:
        return None if self.price_per_kwh is None else self.facility_kwh(kwh) * self.price_per_kwh

    def co2_kg(self, kwh: float) -> float | None:
        if self.gco2_per_kwh is None:
            return None
        return self.facility_kwh(kwh) * self.gco2_per_kwh / 1000.0


@dataclass(frozen=True)
class Policy:
    """The whole validated site policy (see `etc/slurmgpu.toml`)."""

    tiers: tuple[Tier, ...]
    kinds: tuple[JobKind, ...]
    partitions: tuple[Partition, ...]
    default_tier: str
    default_kind: str | None = None
    shards_per_gpu: int | None = None
    priority_weight_qos: int = 10000
    source: str = ""
    # GPU type -> memory MiB for types the catalogue does not know (`[gpu_memory]`)
    gpu_memory_mib: tuple[tuple[str, float], ...] = ()
    objective: Objective = Objective()  # `[objective]`: what `advise` optimizes
    # the `[idle]` table; None when the policy has none (`slurmgpu idle` then refuses)
    idle: IdlePolicy | None = None
    # the `[autopilot]` table; None: the defaults of `AutopilotPolicy`
    autopilot: AutopilotPolicy | None = None
    # the `[energy]` table; None when the policy has none (no money or CO2 in reports)
    energy: EnergyPolicy | None = None

    def tier(self, name: str) -> Tier | None:
        """The tier called `name` (exact), or None."""
        return next((t for t in self.tiers if t.name == name), None)

    def tier_for_qos(self, qos: str | None) -> Tier | None:
        """The tier whose QOS is `qos` (Slurm QOS names are case-insensitive), or None."""
        if not qos:
            return None
        lowered = qos.strip().lower()
        return next((t for t in self.tiers if t.qos.lower() == lowered), None)

    def kind(self, name: str | None) -> JobKind | None:
        """The job kind called `name`, or None."""
        if not name:
            return None
        return next((k for k in self.kinds if k.name == name), None)

    def partition(self, name: str) -> Partition | None:
        return next((p for p in self.partitions if p.name == name), None)

    def tiers_for(self, user: str | None, account: str | None) -> list[Tier]:
        """Tiers `user`/`account` may use, in policy order."""
        return [t for t in self.tiers if t.allows(user, account)]

    def preemptors(self, tier: Tier) -> list[Tier]:
        """Tiers that may preempt `tier`."""
        return [t for t in self.tiers if tier.name in t.preempts]

    def requeued_when_preempted(self, tier: Tier) -> bool:
        """True when a preempted job of `tier` is requeued (its preemptors' mode)."""
        return any(t.preempt_mode == "requeue" for t in self.preemptors(tier))

    def preempt_qos(self, tier: Tier) -> tuple[str, ...]:
        """QOS names `tier` preempts (what sacctmgr's Preempt= takes)."""
        return tuple(sorted(self.tier(n).qos for n in tier.preempts))  # type: ignore[union-attr]

    @property
    def preempt_modes(self) -> tuple[str, ...]:
        """The per-QOS preempt modes the tiers that preempt anything use."""
        return tuple(sorted({t.preempt_mode for t in self.tiers if t.preempts}))


# --- slice arithmetic (pure, from the catalogue) ---------------------------------------


def mig_gres_type(model: GpuModel, profile: MigProfile) -> str:
    """The GRES type Slurm's NVML autodetect gives a MIG device: `<model prefix>_<profile>`."""
    return f"{model.mig_type_prefix}_{profile.name}"


def models_offering(profile_name: str) -> list[tuple[GpuModel, MigProfile]]:
    """Every catalogue (model, profile) pair with that MIG profile name."""
    return [(m, p) for m in GPU_MODELS for p in m.mig_profiles if p.name == profile_name]


def mig_profile_for_type(gres_type: str) -> tuple[GpuModel, MigProfile] | None:
    """Reverse of `mig_gres_type`: `nvidia_h100_80gb_hbm3_3g.40gb` -> (H100, 3g.40gb).

    Also accepts the bare profile name (`3g.40gb`, what `gen-gres --mig-types short` writes);
    when several models offer it, the one whose instance has the least memory, so a memory
    ask is never promised more than the smallest variant gives.
    """
    for model in GPU_MODELS:
        for profile in model.mig_profiles:
            if gres_type == mig_gres_type(model, profile):
                return model, profile
    offering = models_offering(gres_type)
    if offering:
        return min(offering, key=lambda mp: (mp[1].memory_mib, mp[0].key))
    return None


def slice_memory_mib(s: Slice, shards_per_gpu: int | None = None) -> float | None:
    """GPU memory a slice gets, when the GPU model is known (else None)."""
    model = None
    if s.gpu_model:
        model = next((m for m in GPU_MODELS if m.key == s.gpu_model), None)
    if model is None and s.gres_type:
        model = model_for_type(s.gres_type)
        if model is None and s.kind == SLICE_MIG:
            found = mig_profile_for_type(s.gres_type)
            model = found[0] if found else None
    if model is None:
        return None
    if s.kind == SLICE_MIG:
        profile = model.profile(s.mig_profile or "")
        return float(profile.memory_mib) if profile else None
    if s.kind == SLICE_SHARD:
        if not shards_per_gpu:
            return None
        return model.memory_mib * s.count / shards_per_gpu
    return float(model.memory_mib * s.count)


def slice_gpu_fraction(s: Slice, shards_per_gpu: int | None = None) -> float | None:
    """The share of one GPU a slice is (memory share for MIG: 3g.40gb = 4/8 = 0.5)."""
    if s.kind == SLICE_GPU:
        return float(s.count)
    if s.kind == SLICE_SHARD:
        return s.count / shards_per_gpu if shards_per_gpu else None
    for _, profile in models_offering(s.mig_profile or ""):
        return profile.memory_slices / 8
    return None


def gpus_needed(memory_mib: float, gpu_memory_mib: int) -> int:
    """Whole GPUs needed for `memory_mib`."""
    return max(1, math.ceil(memory_mib / gpu_memory_mib))
