"""`slurmgpu check`: Slurm's live view vs the node's GPUs vs the generated config, and GPU health.

The comparisons are pure functions over typed inputs (a `scontrol show node` record, an
`Inventory`, a gres.conf text, `GpuHealth`); `check_local` and `check_cluster` gather those
from the world and call them. Every `Problem` carries what to do about it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmgpu.fleet.xids import XidOptions, read_xids, xid_problems
from slurmgpu.model.fleet import ERROR, WARNING, GpuHealth, Problem
from slurmgpu.model.inventory import Inventory
from slurmgpu.render import gres
from slurmgpu.sources.slurm import parse_gres_string
from slurmgpu.util.hostlist import expand_hostlist, format_id_list, parse_id_list

# what slurmctld writes when a node registers fewer GPUs than configured (node_mgr.c,
# gres.c: "gres/gpu count reported lower than configured (7 < 8)"; older: "count too low")
GRES_COUNT_REASON = re.compile(r"gres/\w+ count (reported lower than configured|too low)", re.I)
DRAIN_PREFIX = "slurmgpu:"
_MIG_TYPE = re.compile(r"(^|_)\d+g\.\d+gb(\+me)?$")
# XIDs that mean the GPU (or its memory) needs an operator, after NVIDIA's XID catalogue:
# 48 DBE ECC, 61/62 internal micro-controller errors, 63/64 row remapping, 74 NVLink,
# 79 fell off the bus, 92 high single-bit ECC rate, 94/95 contained/uncontained ECC,
# 119/120 GSP errors. Others (13, 31, 43: usually the application's fault) are warnings.
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120})


def _flags(record: Mapping[str, str]) -> set[str]:
    return set(record.get("State", "").split("+"))


def _reason(record: Mapping[str, str]) -> str:
    reason = record.get("Reason", "(null)")
    return "" if reason == "(null)" else reason


def expected_gres(inv: Inventory, opts: gres.GresOptions) -> dict[str, int]:
    """{gres type: count} that gen-gres would configure from this inventory (healthy GPUs)."""
    opts = dataclasses.replace(opts, allow_partial=True)  # lost GPUs are reported apart
    plan = gres.plan_gres(inv, opts)
    return {t: n for name, t, n in gres.gres_counts(plan, opts) if name == "gpu"}


def configured_gres(record: Mapping[str, str]) -> dict[str, int]:
    """{gres type: count} of the node's configured `Gres=` (what slurm.conf says)."""
    out: dict[str, int] = {}
    for item in parse_gres_string(record.get("Gres", "")):
        if item.name == "gpu":
            out[item.type or ""] = out.get(item.type or "", 0) + item.count
    return out


def state_problems(node: str, record: Mapping[str, str]) -> list[Problem]:
    """The node's Slurm state: drained for a GRES count, not responding."""
    flags, reason = _flags(record), _reason(record)
    problems = []
    if "DRAIN" in flags and GRES_COUNT_REASON.search(reason):
        problems.append(
            Problem(
                node,
                "drained-gres-count",
                f"Slurm drained it: {reason}",
                "a GPU is missing or gres.conf overstates the node: compare `nvidia-smi -L` "
                "with gres.conf, fix or regenerate (gen-gres), then `scontrol update "
                f"NodeName={node} State=RESUME`",
            )
        )
    if "NOT_RESPONDING" in flags or "DOWN" in flags:
        problems.append(
            Problem(
                node,
                "node-down",
                f"Slurm has it {record.get('State')}" + (f" ({reason})" if reason else ""),
                "check that slurmd runs on the node and reaches slurmctld",
            )
        )
    return problems


def drift_problems(
    node: str, record: Mapping[str, str], inv: Inventory, opts: gres.GresOptions
) -> list[Problem]:
    """Slurm's configured GPUs vs the GPUs NVML reports now (counts, types, MIG layout, CPUs)."""
    problems = [
        Problem(
            node,
            "gpu-lost",
            f"GPU {s.index}" + (f" ({s.pci_bus_id})" if s.pci_bus_id else "") + f": {s.reason}",
            "check `dmesg` for Xid 79 (fell off the bus); drain the node, reset or reseat the "
            "GPU, RMA if it recurs",
        )
        for s in inv.skipped_gpus
    ]
    want, have = configured_gres(record), expected_gres(inv, opts)
    mig_want = {t: n for t, n in want.items() if _MIG_TYPE.search(t)}
    mig_have = {t: n for t, n in have.items() if _MIG_TYPE.search(t)}
    if mig_want != mig_have:
        # one finding for the whole layout: per-profile counts would read as lost GPUs
        problems.append(
            Problem(
                node,
                "mig-layout-changed",
                f"MIG layout changed: Slurm has {_gres_list(mig_want)}, the GPUs now have "
                f"{_gres_list(mig_have)}",
                "regenerate gres.conf and the node line (gen-gres) and restart slurmd: "
                "Slurm does not follow MIG changes on a running node",
            )
        )
    want = {t: n for t, n in want.items() if t not in mig_want}
    have = {t: n for t, n in have.items() if t not in mig_have}
    for gtype in sorted(set(want) & set(have)):
        if have[gtype] < want[gtype]:
            problems.append(
                Problem(
                    node,
                    "missing-gpu",
                    f"{want[gtype] - have[gtype]} x gpu:{gtype} missing: Slurm has "
                    f"{want[gtype]}, NVML reports {have[gtype]}",
                    "find the GPU (`nvidia-smi -L`, `dmesg | grep -i xid`); until it is back, "
                    "lower the node's Gres= and gres.conf (gen-gres) or keep the node drained",
                )
            )
        elif have[gtype] > want[gtype]:
            problems.append(
                Problem(
                    node,
                    "extra-gpu",
                    f"{have[gtype] - want[gtype]} x gpu:{gtype} more than Slurm has configured "
                    f"({want[gtype]})",
                    "regenerate the node line and gres.conf (gen-gres) so jobs can use them",
                    WARNING,
                )
            )
    only_slurm = {t: want[t] for t in set(want) - set(have)}
    only_nvml = {t: have[t] for t in set(have) - set(want)}
    if only_slurm or only_nvml:
        problems.append(
            Problem(
                node,
                "type-mismatch",
                f"GPU type mismatch: Slurm has {_gres_list(only_slurm)}, NVML reports "
                f"{_gres_list(only_nvml)}",
                "regenerate the node line and gres.conf from a fresh inventory (gen-gres)",
            )
        )
    problems += _cpu_problems(node, record, inv, opts)
    return problems


def _gres_list(counts: Mapping[str, int]) -> str:
    return ",".join(f"gpu:{t}:{n}" for t, n in sorted(counts.items())) or "none"


def _cpu_problems(
    node: str, record: Mapping[str, str], inv: Inventory, opts: gres.GresOptions
) -> list[Problem]:
    sockets, per_socket = inv.host.layout(numa_as_socket=opts.numa_as_socket)
    want = {
        "CPUTot": inv.host.cpu_count,
        "Sockets": sockets,
        "CoresPerSocket": per_socket,
        "ThreadsPerCore": inv.host.threads_per_core,
    }
    wrong = [
        f"{k}={record[k]} (host: {v})"
        for k, v in want.items()
        if k in record and record[k].isdigit() and int(record[k]) != v
    ]
    if not wrong:
        return []
    return [
        Problem(
            node,
            "wrong-cpu-layout",
            "CPU layout differs from the host: " + ", ".join(wrong),
            "regenerate the node line (gen-gres --node-line); Cores= in gres.conf follow it",
        )
    ]


def gres_conf_problems(
    node: str, gres_text: str, inv: Inventory, opts: gres.GresOptions
) -> list[Problem]:
    """The installed gres.conf lines for `node` vs what the inventory gives: devices, Cores=."""
    node_opts = dataclasses.replace(opts, node_name=node, allow_partial=True)
    expected = _cores_by_file(gres.render_gres_conf(inv, node_opts, inventory_sha256="-"), node)
    actual = _cores_by_file(gres_text, node)
    problems = []
    for path in sorted(set(expected) & set(actual)):
        if expected[path] != actual[path]:
            problems.append(
                Problem(
                    node,
                    "wrong-cores",
                    f"gres.conf gives {path} Cores={format_id_list(actual[path])}, the GPU's CPU "
                    f"affinity gives {format_id_list(expected[path])}",
                    "regenerate gres.conf (gen-gres): wrong Cores= put jobs on the far socket",
                )
            )
    for path in sorted(set(expected) - set(actual)):
        problems.append(
            Problem(
                node,
                "gres-conf-missing-gpu",
                f"gres.conf has no line for {path}",
                "regenerate gres.conf (gen-gres)",
            )
        )
    for path in sorted(set(actual) - set(expected)):
        problems.append(
            Problem(
                node,
                "gres-conf-stale-gpu",
                f"gres.conf names {path}, which NVML does not report",
                "regenerate gres.conf (gen-gres); slurmd drains a node whose devices are missing",
            )
        )
    return problems


def _cores_by_file(text: str, node: str) -> dict[str, tuple[int, ...]]:
    """{first device file: cores} of the gpu lines that apply to `node`."""
    out: dict[str, tuple[int, ...]] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if fields.get("Name") != "gpu":
            continue
        if "NodeName" in fields and node not in expand_hostlist(fields["NodeName"]):
            continue
        cores = tuple(parse_id_list(fields.get("Cores", "")))
        if "MultipleFiles" in fields:
            # a MIG device: its caps files identify it
            out[fields["MultipleFiles"]] = cores
        elif "File" in fields:
            for path in expand_hostlist(fields["File"]):
                out[path] = cores
    return out


def vendor_health_problems(node: str, health: Sequence[GpuHealth]) -> list[Problem]:
    """AMD RAS/ECC counts and Ascend health states -> problems."""
    problems = []
    reset = "drain the node and reset the device or reboot; RMA if it recurs"
    for h in health:
        what = (f"AMD GPU renderD{h.index}" if h.vendor == "amd" else f"Ascend NPU {h.index}") + (
            f" ({h.pci_bus_id})" if h.pci_bus_id else ""
        )
        if h.lost:
            problems.append(Problem(node, "npu-lost", f"{what}: DCMI says no such device", reset))
        elif h.error:
            kind = "amdsmi-error" if h.vendor == "amd" else "dcmi-error"
            problems.append(Problem(node, kind, f"{what}: {h.error}", reset))
        if h.ecc_uncorrected_volatile:
            problems.append(
                Problem(
                    node,
                    "ecc-uncorrected",
                    f"{what} has {h.ecc_uncorrected_volatile} uncorrectable RAS/ECC error(s) "
                    "since the driver loaded",
                    reset,
                )
            )
        if h.ecc_deferred:
            problems.append(
                Problem(
                    node,
                    "ecc-deferred",
                    f"{what} has {h.ecc_deferred} deferred (poisoned) ECC error(s)",
                    "watch it: a job that reads the poisoned memory fails; reset at the next drain",
                    WARNING,
                )
            )
        if h.health_alarm:
            level = {1: "a minor", 2: "a major", 3: "a critical"}.get(h.health_alarm, "an")
            problems.append(
                Problem(
                    node,
                    "npu-alarm",
                    f"{what} reports {level} alarm (DCMI health {h.health_alarm})",
                    "read the NPU's error codes (npu-smi info); " + reset
                    if h.health_alarm >= 2
                    else "read the NPU's error codes (npu-smi info)",
                    ERROR if h.health_alarm >= 2 else WARNING,
                )
            )
    return problems


def health_problems(node: str, health: Sequence[GpuHealth]) -> list[Problem]:
    """NVML health counters -> problems (lost GPUs, XIDs, ECC, pending retirements, PM off);
    AMD and Ascend devices through `vendor_health_problems`."""
    other = [h for h in health if h.vendor != "nvidia"]
    health = [h for h in health if h.vendor == "nvidia"]
    problems = vendor_health_problems(node, other)
    reset = "drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot; RMA if it recurs"
    for h in health:
        gpu = f"GPU {h.index}" + (f" ({h.pci_bus_id})" if h.pci_bus_id else "")
        if h.lost:
            problems.append(
                Problem(
                    node,
                    "gpu-lost",
                    f"{gpu} fell off the bus (NVML: GPU is lost, Xid 79)",
                    "drain the node, reseat or reset the GPU (reboot); RMA if it recurs",
                )
            )
            continue
        if h.error:
            problems.append(Problem(node, "nvml-error", f"{gpu}: NVML error: {h.error}", reset))
        for xid in dict.fromkeys(h.xids):
            critical = xid in CRITICAL_XIDS
            problems.append(
                Problem(
                    node,
                    "xid",
                    f"{gpu} reported Xid {xid}",
                    reset if critical else "usually the application's fault: check its job",
                    ERROR if critical else WARNING,
                )
            )
        if h.ecc_uncorrected_volatile:
            problems.append(
                Problem(
                    node,
                    "ecc-uncorrected",
                    f"{gpu} has {h.ecc_uncorrected_volatile} uncorrected ECC error(s) since the "
                    "last reset",
                    reset,
                )
            )
        if h.retired_pages_pending:
            problems.append(
                Problem(node, "retired-pages-pending", f"{gpu} has page retirements pending", reset)
            )
        if h.remapped_rows_pending:
            problems.append(
                Problem(node, "row-remap-pending", f"{gpu} has a row remapping pending", reset)
            )
        if h.remapping_failed:
            problems.append(
                Problem(node, "row-remap-failed", f"{gpu}: row remapping failed", "RMA the GPU")
            )
        if h.persistence_mode is False:
            problems.append(
                Problem(
                    node,
                    "persistence-off",
                    f"{gpu} has persistence mode off",
                    "run nvidia-persistenced (or `nvidia-smi -pm 1`): without it the driver "
                    "tears down between jobs and job start-up slows",
                    WARNING,
                )
            )
    return problems


@dataclass(frozen=True)
class HealthAction:
    """What the HealthCheckProgram mode does to the node: drain, resume or nothing."""

    kind: str  # "drain" | "resume" | "none" | "skipped" (another command holds the node)
    reason: str = ""


def health_check_action(record: Mapping[str, str], problems: Sequence[Problem]) -> HealthAction:
    """Drain on any error; resume only a node that slurmgpu itself drained (as NHC does)."""
    errors = [p for p in problems if p.severity == ERROR]
    flags, reason = _flags(record), _reason(record)
    if errors:
        text = f"{DRAIN_PREFIX} {errors[0].message}"
        if len(errors) > 1:
            text += f" (+{len(errors) - 1} more)"
        text = text[:200]
        if "DRAIN" in flags and reason.startswith(text):
            return HealthAction("none")
        return HealthAction("drain", text)
    if "DRAIN" in flags and reason.startswith(DRAIN_PREFIX):
        return HealthAction("resume")
    return HealthAction("none")


@dataclass(frozen=True)
class CheckReport:
    """Everything one run found: the nodes looked at and their problems."""

    nodes: tuple[str, ...]
    problems: tuple[Problem, ...]
    action: HealthAction | None = None  # HealthCheckProgram mode only

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]


def check_local(
    node: str,
    *,
    host_root: str = "/",
    gres_conf: str | None = None,
    opts: gres.GresOptions | None = None,
    env: Mapping[str, str] | None = None,
    xids: XidOptions | None = None,
) -> CheckReport:
    """Check the node this runs on: its Slurm record, its live NVML inventory and health,
    and the Xids logged since the last health check (kernel log, DCGM; `fleet/xids.py`)."""
    from slurmgpu.errors import InventoryError
    from slurmgpu.sources import gpu_health, nvml, vendor_health
    from slurmgpu.sources.slurm import scontrol_show

    opts = opts or gres.GresOptions()
    records = scontrol_show("node", node, env=env)
    record = records[0] if records else {}
    problems = state_problems(node, record)
    # the kernel log is read even when NVML is down: it says why
    xid_read = read_xids(xids or XidOptions(host_root=host_root), CRITICAL_XIDS)
    other, _why_not = vendor_health.read_vendor_health()  # AMD, Ascend: counters only
    try:
        inv = nvml.read_inventory(host_root, allow_partial=True)
        health = gpu_health.read_health()
    except InventoryError as exc:
        if other:  # an AMD or Ascend node: NVML has nothing to say here
            problems += vendor_health_problems(node, other)
            return CheckReport((node,), tuple(problems))
        problems.append(Problem(node, "nvml-error", str(exc), "check the driver (`nvidia-smi`)"))
        problems += xid_problems(node, xid_read, [], CRITICAL_XIDS)
        return CheckReport((node,), tuple(problems))
    health = [*health, *other]
    problems += drift_problems(node, record, inv, opts)
    # a lost GPU is already among the inventory's skipped GPUs: report it once
    lost_reported = any(p.kind == "gpu-lost" for p in problems)
    problems += [
        p for p in health_problems(node, health) if not (p.kind == "gpu-lost" and lost_reported)
    ]
    problems += xid_problems(node, xid_read, health, CRITICAL_XIDS)
    if gres_conf is not None:
        problems += gres_conf_problems(node, gres_conf, inv, opts)
    return CheckReport((node,), tuple(problems))


def check_cluster(
    *,
    nodes: str | None = None,
    snapshot_dir: str | None = None,
    gres_conf: str | None = None,
    opts: gres.GresOptions | None = None,
    env: Mapping[str, str] | None = None,
) -> CheckReport:
    """Check many nodes from the controller: live records vs snapshots (`inventory --nodes`).

    Without a snapshot for a node only its Slurm state is checked (a warning says so). GPU
    health needs NVML on the node: run `check --local` there (HealthCheckProgram).
    """
    from pathlib import Path

    from slurmgpu.errors import UsageError
    from slurmgpu.sources import snapshot
    from slurmgpu.sources.slurm import scontrol_show

    opts = opts or gres.GresOptions()
    inventories: dict[str, Inventory] = {}
    if snapshot_dir is not None:
        d = Path(snapshot_dir)
        if not d.is_dir():
            raise UsageError(f"--snapshot-dir {snapshot_dir}: not a directory")
        for path in sorted(d.glob("*.json")):
            inv = snapshot.load(path)
            inventories[inv.node_name] = inv
    records = {r.get("NodeName", ""): r for r in scontrol_show("node", env=env)}
    try:
        names = expand_hostlist(nodes) if nodes else sorted(records)
    except ValueError as exc:
        raise UsageError(f"--nodes {nodes!r}: {exc}") from exc
    problems: list[Problem] = []
    for node in names:
        record = records.get(node)
        if record is None:
            problems.append(
                Problem(node, "unknown-node", "Slurm does not know this node", "check --nodes")
            )
            continue
        problems += state_problems(node, record)
        inv = inventories.get(node)
        if inv is None:
            problems.append(
                Problem(
                    node,
                    "no-inventory",
                    "no snapshot: only its Slurm state was checked",
                    "run `slurmgpu inventory --nodes ... --output-dir DIR` and pass "
                    "--snapshot-dir DIR",
                    WARNING,
                )
            )
            continue
        problems += drift_problems(node, record, inv, opts)
        if gres_conf is not None:
            problems += gres_conf_problems(node, gres_conf, inv, opts)
    return CheckReport(tuple(names), tuple(problems))


def apply_health_action(
    node: str,
    report: CheckReport,
    env: Mapping[str, str] | None = None,
    lock_dir: Path | None = None,
) -> CheckReport:
    """HealthCheckProgram mode: drain the node with the first error, or resume it when clean.

    Holds the node's lock (`util.lock`, the one `mig apply` holds) while it acts: while
    another command changes the node (a re-layout stops slurmd and the GPUs change under it),
    the action is skipped, not taken (`HealthAction("skipped", why)`)."""
    from slurmgpu.sources.slurm import scontrol_show
    from slurmgpu.util.lock import LockUnavailable, NodeLocked, node_locks
    from slurmgpu.util.lock import lock_dir as shared_lock_dir
    from slurmgpu.util.proc import run

    def act() -> HealthAction:
        records = scontrol_show("node", node, env=env)
        action = health_check_action(records[0] if records else {}, report.problems)
        if action.kind == "drain":
            argv = ["scontrol", "update", f"NodeName={node}", "State=DRAIN"]
            run([*argv, f"Reason={action.reason}"], env=env)
        elif action.kind == "resume":
            run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env)
        return action

    try:
        # a health check skips a node being changed rather than keep slurmd's check waiting
        with node_locks(lock_dir or shared_lock_dir(), [node], "check --health-check", wait_s=0):
            action = act()
    except NodeLocked as exc:
        action = HealthAction("skipped", str(exc))
    except LockUnavailable:  # no lock directory here (not root): a health check still acts
        action = act()
    return CheckReport(report.nodes, report.problems, action)
