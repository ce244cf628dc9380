"""Xids since the last health check: the kernel log and DCGM through
`sources/kernel_xids.py`, a state file, and the problems `check` reports for them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurmgpu.errors import SlurmgpuError
from slurmgpu.model.fleet import ERROR, WARNING, GpuHealth, Problem, XidEvent
from slurmgpu.sources import kernel_xids as kx

STATE_NAME = "var/lib/slurmgpu/xid-state.json"


@dataclass(frozen=True)
class XidOptions:
    """Where to read Xids and keep the state. `save`: this run moves the state on (the
    HealthCheckProgram run); a plain `check --local` only looks. `clear`: forget the
    critical Xids remembered so far (after the GPU was reset) and skip to the log's end."""

    host_root: str = "/"
    kernel_log: str | None = None  # default: HOST_ROOT/dev/kmsg, else var/log/kern.log
    dcgm: str | None = None  # dcgm-exporter URL or a file with its exposition
    state_path: str | None = None  # default: HOST_ROOT/var/lib/slurmgpu/xid-state.json
    save: bool = False
    clear: bool = False


@dataclass(frozen=True)
class XidRead:
    new: tuple[XidEvent, ...]
    pending: tuple[XidEvent, ...]  # critical, remembered until a reboot or --clear-xids
    warnings: tuple[str, ...]


def read_xids(opts: XidOptions, critical: frozenset[int]) -> XidRead:
    """The Xids logged since the state's position, and the critical ones not cleared."""
    state_path = Path(opts.state_path or Path(opts.host_root) / STATE_NAME)
    state, warning = kx.XidState.load(state_path)
    warnings = [warning] if warning else []
    boot = kx.boot_id(opts.host_root)
    if boot and state.boot_id and boot != state.boot_id:
        state.pending = []  # rebooted: the GPUs were reset
    new: list[XidEvent] = []
    log = Path(opts.kernel_log) if opts.kernel_log else kx.kernel_log_path(opts.host_root)
    if log is None:
        warnings.append(
            f"no kernel log under {opts.host_root} (dev/kmsg, var/log/kern.log): "
            "Xids raised between runs are not seen (give --kernel-log)"
        )
    else:
        try:
            if log.name == "kmsg" or log.is_char_device():
                new += kx.read_kmsg(log, state, boot)
            else:
                new += kx.read_text_log(log, state)
        except OSError as exc:
            warnings.append(f"cannot read the kernel log {log}: {exc.strerror or exc}")
    if opts.dcgm:
        try:
            values = kx.parse_dcgm_metrics(kx.read_dcgm(opts.dcgm))
            new += kx.dcgm_events(values, state, opts.dcgm)
        except (OSError, ValueError) as exc:
            warnings.append(f"DCGM {opts.dcgm}: {exc}")
    if opts.clear:
        state.pending, new = [], []
    kx.remember_pending(state, new, critical)
    if opts.save or opts.clear:
        try:
            from slurmgpu.util.atomic import write_atomic

            state_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(state_path, state.to_json() + "\n", mode=0o600, backup=False)
        except (OSError, SlurmgpuError) as exc:  # a state it cannot keep is a warning
            warnings.append(f"cannot save the Xid state {state_path}: {exc}")
    new_keys = {(e.pci_bus_id, e.xid) for e in new}
    pending = [e for e in kx.pending_events(state) if (e.pci_bus_id, e.xid) not in new_keys]
    return XidRead(tuple(new), tuple(pending), tuple(warnings))


def xid_problems(
    node: str, read: XidRead, health: list[GpuHealth], critical: frozenset[int]
) -> list[Problem]:
    """One problem per (GPU, Xid) from the log / DCGM that NVML did not already report."""
    index_of = {h.pci_bus_id: h.index for h in health if h.pci_bus_id}
    from_nvml = {(h.pci_bus_id, x) for h in health for x in h.xids}
    problems = [
        Problem(node, "xid-source", w, "see docs/fleet.md (Xids)", WARNING) for w in read.warnings
    ]
    seen = set()
    for event, remembered in [*((e, False) for e in read.new), *((e, True) for e in read.pending)]:
        key = (event.pci_bus_id, event.xid)
        if key in seen or key in from_nvml:
            continue
        seen.add(key)
        index = index_of.get(event.pci_bus_id)
        gpu = (
            f"GPU {index} ({event.pci_bus_id})"
            if index is not None
            else (f"the GPU at {event.pci_bus_id}")
        )
        where = "DCGM" if "DCGM" in event.detail else "the kernel log"
        detail = ", ".join(x for x in (event.when, event.detail) if x and "DCGM" not in x)
        message = f"{gpu} reported Xid {event.xid} in {where}" + (f" ({detail})" if detail else "")
        if remembered:
            message += "; still not cleared"
        if event.xid in critical:
            action = (
                "drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot; then "
                "`slurmgpu check --clear-xids` (a reboot clears it too); RMA if it recurs"
            )
            problems.append(Problem(node, "xid", message, action, ERROR))
        else:
            problems.append(
                Problem(
                    node, "xid", message, "usually the application's fault: check its job", WARNING
                )
            )
    return problems
