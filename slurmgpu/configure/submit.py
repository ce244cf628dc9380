"""`submit`: the wrapper's arguments -> the sbatch command line (tier, job kind, GPU slice).

Start-up matters here (it runs on every submission): this module imports nothing heavy, and
the path it runs never imports pandas, pynvml or jinja2.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Submission:
    """The sbatch command to run (`argv`), or to print when `dry_run`."""

    argv: tuple[str, ...]
    dry_run: bool


def submit(arglist: list[str]) -> Submission:
    """The sbatch command for the wrapper's arguments (`slurmgpu submit ARGS`).

    Every failure is a `UsageError` (exit 2, as sbatch's own mistakes): a broken policy or
    sinfo failing is its first line and the count of further problems."""
    from slurmgpu.errors import SlurmgpuError, UsageError

    try:
        argv = plan_submission(arglist)
    except UsageError:
        raise
    except SlurmgpuError as exc:
        first, _, rest = str(exc).partition("\n")
        more = f" (and {rest.count(chr(10)) + 1} more problems)" if rest else ""
        raise UsageError(first + more) from exc
    if argv[0] == "--dry-run":
        return Submission(tuple(argv[1:]), True)
    return Submission(tuple(argv), False)


_OURS_WITH_VALUE = {
    "--tier": "tier",
    "--kind": "kind",
    "--gpu-mem": "gpu_mem",
    "--accel": "accel",
    "--policy": "policy",
}


def split_args(args: list[str]) -> tuple[dict[str, str], list[str], list[str], bool]:
    """(our options, sbatch options, [script, *script args], dry_run) from the raw arguments."""
    from slurmgpu.errors import UsageError

    ours: dict[str, str] = {}
    sbatch: list[str] = []
    dry_run = False
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            return ours, sbatch, args[i:], dry_run
        name, eq, value = arg.partition("=")
        if name in _OURS_WITH_VALUE:
            if not eq:
                if i >= len(args):
                    raise UsageError(f"{name} needs a value")
                value = args[i]
                i += 1
            ours[_OURS_WITH_VALUE[name]] = value
        elif arg == "--dry-run":
            dry_run = True
        else:
            sbatch.append(arg)
    return ours, sbatch, [], dry_run


def plan_submission(arglist: list[str]) -> list[str]:
    """The sbatch argv for the wrapper's arguments (prefixed by `--dry-run` when asked)."""
    import os

    from slurmgpu.errors import UsageError
    from slurmgpu.render.sbatch import (
        Additions,
        build_argv,
        env_options,
        scan_options,
        script_directives,
    )

    ours, sbatch_args, script_args, dry_run = split_args(arglist)
    given_cmdline = scan_options(sbatch_args)
    if not script_args and given_cmdline.get("wrap") is None:
        raise UsageError("put `--` and the batch script after the sbatch options")
    directives: list[str] = []
    if script_args:
        try:
            with open(script_args[0], encoding="utf-8", errors="replace") as fh:
                directives = script_directives(fh.read(256 * 1024))
        except OSError as exc:
            msg = f"cannot read the batch script {script_args[0]}: {exc.strerror}"
            raise UsageError(msg) from exc
    # SBATCH_* variables rank between the script's lines and the command line (sbatch(1))
    directives += env_options(os.environ)
    given = scan_options([*directives, *sbatch_args])

    policy = None
    if "tier" in ours or "kind" in ours or "policy" in ours:
        from slurmgpu.sources.policy_file import default_policy_path, load_policy

        policy = load_policy(ours.get("policy") or default_policy_path())
    tags: dict[str, str] = {}
    qos = None
    kind = None
    if "tier" in ours:
        tier = policy.tier(ours["tier"]) if policy else None
        if tier is None:
            names = ", ".join(t.name for t in policy.tiers) if policy else ""
            raise UsageError(f"unknown tier '{ours['tier']}': use {names}")
        asked_qos = given.get("qos")
        if asked_qos is not None:
            asked_tier = policy.tier_for_qos(asked_qos)
            if asked_tier is not None and asked_tier.name != tier.name:
                raise UsageError(
                    f"--qos={asked_qos} is tier {asked_tier.name}, but --tier {tier.name} was asked"
                )
        qos = tier.qos
        tags["tier"] = tier.name
    if "kind" in ours:
        kind = policy.kind(ours["kind"]) if policy else None
        if kind is None:
            names = ", ".join(k.name for k in policy.kinds) if policy else ""
            raise UsageError(f"unknown job kind '{ours['kind']}': use {names}")
        tags["kind"] = kind.name

    gres = kind.slice.gres if kind else None
    if "gpu_mem" in ours and not given.has_gpu_request():
        gres = _slice_for_memory(ours["gpu_mem"], policy)
    if "accel" in ours and not given.has_gpu_request():
        gres = _device_for_request(ours["accel"], _accel_kind(policy, kind, given), policy)
    add = Additions(
        qos=qos,
        gres=gres,
        partition=kind.partition if kind else None,
        time_limit_min=kind.time_limit_min if kind else None,
        tags=tags,
        requeued_tier=_requeued_tier(policy, tags.get("tier"), given),
    )
    sbatch = os.environ.get("SLURMGPU_SBATCH", "sbatch")
    argv = build_argv(sbatch, sbatch_args, script_args, directives, add)
    return ["--dry-run", *argv] if dry_run else argv


def _requeued_tier(policy, tier_name: str | None, given) -> str | None:
    """The job's tier when preemption requeues it (as job_submit.lua will decide), else None.

    The tier: --tier, else a tier's --qos, else a tier= tag in the comment, else the
    default tier. Without a policy the wrapper cannot know (job_submit.lua still decides).
    """
    if policy is None:
        return None
    from slurmgpu.render.sbatch import tags_in

    tier = policy.tier(tier_name) if tier_name else None
    tier = tier or policy.tier_for_qos(given.get("qos"))
    tag = tags_in(given.get("comment")).get("tier")
    tier = tier or (policy.tier(tag) if tag else None) or policy.tier(policy.default_tier)
    if tier is not None and policy.requeued_when_preempted(tier):
        return tier.name
    return None


def _accel_kind(policy, kind, given):
    """The kind whose `accel` classes an --accel request defaults to, as job_submit.lua
    decides it: --kind, else a kind= tag in the comment, else the policy's default kind."""
    if kind is not None or policy is None:
        return kind
    from slurmgpu.render.sbatch import tags_in

    tag = tags_in(given.get("comment")).get("kind")
    name = tag or policy.default_kind
    return policy.kind(name) if name else None


def _device_for_request(text: str, kind, policy) -> str:
    """`--accel`: the --gres of the smallest fitting device across vendors (docs/vendors.md)."""
    from slurmgpu.errors import SlurmCommandError, UsageError
    from slurmgpu.model import accel
    from slurmgpu.sources.cluster_gres import node_gres

    request = accel.parse_request(text, default_classes=kind.accel if kind else ())
    try:
        nodes = node_gres()
    except SlurmCommandError as exc:
        raise UsageError(f"--accel needs the cluster's GRES (sinfo): {exc}") from exc
    shards = policy.shards_per_gpu if policy else None
    return accel.route(nodes, request, shards).gres


def _slice_for_memory(text: str, policy) -> str:
    """The smallest slice holding `text` of GPU memory: live cluster GRES, else the policy."""
    from slurmgpu.errors import SlurmCommandError, UsageError
    from slurmgpu.model import slicing
    from slurmgpu.sources.cluster_gres import node_gres
    from slurmgpu.util.units import parse_size_mib

    try:
        memory_mib = parse_size_mib(text, default_unit="G")
    except ValueError as exc:
        raise UsageError(f"--gpu-mem: {exc}") from exc
    shards = policy.shards_per_gpu if policy else None
    try:
        nodes = node_gres()
    except SlurmCommandError:
        nodes = []
    if nodes:
        found = slicing.candidates(nodes, memory_mib, shards)
        if found:
            return found[0].slice.gres
        biggest = slicing.largest(nodes, shards)
        what = (
            f"the largest is {biggest.slice.gres} ({biggest.memory_mib / 1024:.0f} GiB)"
            if biggest
            else "no node offers GPUs of a known model"
        )
        raise UsageError(f"no GPU slice on this cluster holds {text} of GPU memory: {what}")
    if policy is not None:
        found = slicing.policy_candidates([k.slice for k in policy.kinds], memory_mib, shards)
        if found:
            return found[0].slice.gres
    raise UsageError(f"no GPU slice known to hold {text} of GPU memory (sinfo gave no GPUs)")
