"""gres.conf and the matching slurm.conf pieces (GresTypes=, NodeName=) from an Inventory.

Pure: model in, text out (through templates/gres.conf.j2 and templates/slurm-node.conf.j2).
Every Slurm-specific choice is computed here and explained in a comment of the output:
- File= names /dev/nvidia<MINOR> (the minor number, not NVML's index: they can differ).
- Links= counts NVLinks per GPU pair in gres.conf order (-1 self). On NVSwitch boards every
  pair on the same switch fabric gets the GPU's active link count; Slurm's own
  AutoDetect=nvml leaves them 0 because an NVSwitch's bus id is not another GPU's.
- Cores= are Slurm's abstract core ids, widened to whole sockets where the target Slurm
  rejects partial sockets (gres.c _check_core_range_matches_sock, 24.05.5+).
- Other vendors (docs/vendors.md): AMD GPUs are `Name=gpu File=/dev/dri/renderD<minor>` with
  XGMI `Links=` (one line per logical GPU of a compute partition, typed `mi300x_cpx`); Ascend
  NPUs are `Name=npu File=/dev/davinci<phy id>` with HCCS `Links=`. Links= count within one
  GRES name (Slurm indexes them among the node's records of that name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurmgpu import __version__
from slurmgpu.errors import InventoryError, UsageError
from slurmgpu.model.gpu import (
    REMOTE_GPU,
    REMOTE_NVSWITCH,
    VENDOR_AMD,
    VENDOR_ASCEND,
    VENDOR_NVIDIA,
    Gpu,
    MigDevice,
)
from slurmgpu.model.gres_record import GresDevice
from slurmgpu.model.inventory import Inventory
from slurmgpu.model.validate import GRES_TYPE, HOST_NAME, layout_problem, missing_gpus
from slurmgpu.render.guard import check_config_lines
from slurmgpu.render.templating import render
from slurmgpu.util.hostlist import (
    compress_hostlist,
    expand_hostlist,
    format_id_list,
    parse_id_list,
)

DEFAULT_SLURM_VERSION = (22, 5, 0)
# MultipleFiles= (needed for MIG) appeared in Slurm 20.11; older releases are not supported.
MIN_SLURM_VERSION = (20, 11, 0)
# b886b6e82f "Require that cores specification match slurm socket boundaries" (24.05.5):
# a GPU's Cores= must cover each socket it touches completely.
WHOLE_SOCKETS_FROM = (24, 5, 5)
# 06fa614909 / f0f6916b28 (25.11.0): Cores= must be exactly one socket, or every core.
ONE_SOCKET_FROM = (25, 11, 0)


def format_version(version: tuple[int, int, int]) -> str:
    return f"{version[0]}.{version[1]:02d}.{version[2]}"


@dataclass(frozen=True)
class GresOptions:
    """Every choice gen-gres offers (the CLI options map one to one)."""

    slurm_version: tuple[int, int, int] = DEFAULT_SLURM_VERSION
    gpu_types: str = "short"  # short: a100 | full: nvidia_a100-sxm4-40gb (autodetect style)
    mig_types: str = "short"  # short: 1g.10gb | full: nvidia_a100_1g.10gb
    shards_per_gpu: int = 0
    numa_as_socket: bool = False  # the node line uses SlurmdParameters=numa_node_as_socket
    # NodeName (a hostlist, e.g. dgx[01-10]) for the node line and, when set, every gres.conf
    # line; default: the inventory's host name on the node line, no NodeName= in gres.conf
    node_name: str | None = None
    node_hostname: str | None = None  # NodeHostname= on the node line, when set
    allow_partial: bool = False

    def __post_init__(self) -> None:
        for name in ("gpu_types", "mig_types"):
            if getattr(self, name) not in ("short", "full"):
                raise UsageError(f"--{name.replace('_', '-')}: use short or full")
        if self.shards_per_gpu < 0:
            raise UsageError("--shards-per-gpu: must be 1 or more")
        for name in ("node_name", "node_hostname"):
            value = getattr(self, name)
            if value is not None:
                check_node_names(value, f"--{name.replace('_', '-')}")
        if self.slurm_version < MIN_SLURM_VERSION:
            raise UsageError(
                f"Slurm {format_version(self.slurm_version)} is too old: MIG and this "
                "generator need MultipleFiles= (Slurm 20.11 or later)"
            )


def check_node_names(text: str, option: str) -> None:
    """A NodeName= value: a hostlist of names Slurm accepts, nothing that rewrites the line."""
    try:
        names = expand_hostlist(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from exc
    if not names:
        raise UsageError(f"{option}: no node name given")
    for name in names:
        bad = HOST_NAME.problem(name)
        if bad:
            raise UsageError(f"{option}: {bad}")


@dataclass(frozen=True)
class GresRecord:
    """One `Name=gpu` device (a whole GPU or one MIG device) before lines are compressed."""

    gpu: Gpu
    mig: MigDevice | None
    gres_type: str
    files: tuple[str, ...]
    cores: tuple[int, ...]
    links: tuple[int, ...] | None = None
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The GRES name: `gpu`, or `npu` for an Ascend NPU."""
        return self.gpu.gres_name


@dataclass
class GresPlan:
    """Everything the templates print, plus warnings for stderr."""

    records: list[GresRecord]
    warnings: list[str] = field(default_factory=list)


# -- types -----------------------------------------------------------------------------------
def _underscorify(text: str) -> str:
    """Slurm's autodetect form: lower case, spaces to `_` (gpu_common_underscorify_tolower)."""
    return re.sub(r"\s+", "_", text.strip()).lower()


def gpu_type(gpu: Gpu, style: str = "short") -> str:
    """`a100` (catalogue short type) or `nvidia_a100-sxm4-40gb` (Slurm autodetect style)."""
    model = gpu.model
    if style == "full":
        base = model.autodetect_type if model else _underscorify(gpu.name)
    elif model:
        base = model.short_type
    else:  # unknown model: drop the vendor word, keep something a user can type
        base = (
            _underscorify(re.sub(r"^((NVIDIA|AMD)\s+)?(GeForce\s+|Instinct\s+)?", "", gpu.name))
            or gpu.gres_name
        )
    # a logical GPU of an MI300 compute partition is a smaller device: its own type, so a
    # job asking for whole mi300x GPUs never gets a CPX slice
    if gpu.compute_partition and gpu.compute_partition != "SPX":
        return f"{base}_{gpu.compute_partition.lower()}"
    return base


def mig_type(gpu: Gpu, mig: MigDevice, style: str = "short") -> str:
    """`1g.10gb` or, full, Slurm's `nvidia_a100_1g.10gb` (GPU name cut at its first '-')."""
    if style == "short":
        return mig.profile
    model = gpu.model
    prefix = model.mig_type_prefix if model else _underscorify(gpu.name.split("-")[0])
    return f"{prefix}_{mig.profile}"


# -- cores -----------------------------------------------------------------------------------
def gpu_cores(inv: Inventory, gpu: Gpu, opts: GresOptions) -> tuple[tuple[int, ...], str | None]:
    """The GPU's abstract cores for `Cores=`, and a note when they were widened."""
    host = inv.host
    sockets, per_socket = host.layout(numa_as_socket=opts.numa_as_socket)
    all_cores = tuple(range(sockets * per_socket))
    exact = tuple(host.abstract_cores(gpu.cpu_affinity, numa_as_socket=opts.numa_as_socket))
    if not exact:
        source = {VENDOR_NVIDIA: "NVML", VENDOR_AMD: "amdsmi"}.get(gpu.vendor, "DCMI/npu-smi")
        return all_cores, f"{gpu.label}: {source} reports no CPU affinity; Cores= lists every core"
    touched = sorted({c // per_socket for c in exact})
    unit = "NUMA node" if opts.numa_as_socket else "socket"
    if opts.slurm_version >= ONE_SOCKET_FROM:
        if len(touched) == 1:
            wanted = tuple(range(touched[0] * per_socket, (touched[0] + 1) * per_socket))
        else:  # affinity spans sockets: 25.11 accepts only "every core" (no affinity)
            wanted = all_cores
        rule = "Slurm >= 25.11 accepts one whole socket or every core"
    elif opts.slurm_version >= WHOLE_SOCKETS_FROM:
        wanted = tuple(c for s in touched for c in range(s * per_socket, (s + 1) * per_socket))
        rule = "Slurm >= 24.05.5 rejects Cores= that do not cover whole sockets"
    else:
        return exact, None
    if wanted == exact:
        return exact, None
    note = (
        f"{gpu.label}: affinity cores {format_id_list(exact)} widened to "
        f"{format_id_list(wanted)} ({unit}s {format_id_list(touched)}): {rule}"
    )
    return wanted, note


# -- links -----------------------------------------------------------------------------------
def _switches(gpu: Gpu) -> set[str]:
    return {
        link.remote_pci_bus_id or ""
        for link in gpu.active_nvlinks
        if link.remote_type == REMOTE_NVSWITCH
    }


def link_count(a: Gpu, b: Gpu) -> int:
    """Links between two devices of one GRES name: NVLink, XGMI or HCCS (0: none)."""
    if a.vendor != b.vendor:
        return 0
    if a.vendor == VENDOR_NVIDIA:
        return nvlink_count(a, b)
    return sum(link.count for link in a.peer_links if link.remote_pci_bus_id == b.pci_bus_id)


def nvlink_count(a: Gpu, b: Gpu) -> int:
    """NVLinks between two GPUs: direct links, or a's whole fabric when they share NVSwitches."""
    direct = sum(
        1
        for link in a.active_nvlinks
        if link.remote_type == REMOTE_GPU and link.remote_pci_bus_id == b.pci_bus_id
    )
    if _switches(a) & _switches(b):
        direct += sum(1 for link in a.active_nvlinks if link.remote_type == REMOTE_NVSWITCH)
    return direct


# -- the plan --------------------------------------------------------------------------------
Entry = tuple[Gpu, MigDevice | None]


def _entries(inv: Inventory, opts: GresOptions, plan: GresPlan) -> list[Entry]:
    """The gpu devices to describe, in GPU order (a MIG GPU's devices in its place)."""
    if inv.skipped_gpus:
        lost = ", ".join(
            f"GPU {s.index}" + (f" ({s.pci_bus_id})" if s.pci_bus_id else "") + f": {s.reason}"
            for s in inv.skipped_gpus
        )
        if not opts.allow_partial:
            raise InventoryError(
                f"the inventory is partial ({lost}); fix the GPU or pass --allow-partial "
                "to generate for the healthy GPUs only"
            )
        plan.warnings.append(f"PARTIAL gres.conf: left out {lost}")
    for missing in missing_gpus(inv):
        if not opts.allow_partial:
            raise InventoryError(
                f"{missing}: a GPU may be missing from the snapshot; re-run slurmgpu inventory, "
                "or pass --allow-partial to generate for the GPUs it describes"
            )
        plan.warnings.append(f"PARTIAL gres.conf: {missing}")
    entries: list[Entry] = []
    for gpu in inv.gpus:
        if not gpu.mig_enabled:
            entries.append((gpu, None))
            continue
        if not gpu.mig_devices:
            plan.warnings.append(
                f"{gpu.label}: MIG is enabled but no MIG devices exist; no gres line for it"
            )
            continue
        for mig in gpu.mig_devices:
            if mig.gi_access_minor is None or mig.ci_access_minor is None:
                message = (
                    f"{gpu.label}: MIG device gi{mig.gi_id}/ci{mig.ci_id} has no caps minor in "
                    "/proc/driver/nvidia-caps/mig-minors"
                )
                if not opts.allow_partial:
                    raise InventoryError(message)
                plan.warnings.append(f"PARTIAL gres.conf: left out {message}")
                continue
            entries.append((gpu, mig))
    if not entries:
        raise InventoryError("no usable GPU in the inventory: nothing to write")
    if opts.shards_per_gpu and any(mig is not None for _gpu, mig in entries):
        # Seen with slurmd -G on 22.05.8: once `shard` is in GresTypes, each MultipleFiles=
        # MIG record is split into one gpu per file (3 GPUs per MIG device).
        raise UsageError(
            "--shards-per-gpu cannot be combined with MIG devices: with shard in GresTypes "
            "Slurm splits each MultipleFiles= MIG line into one GPU per file"
        )
    return entries


def _link_rows(entries: list[Entry]) -> list[tuple[int, ...] | None]:
    """Links= per record (-1 self), counted among the records of the same GRES name; None for
    every record of a name where no pair is linked (PCIe boards)."""
    out: list[tuple[int, ...] | None] = [None] * len(entries)
    for name in dict.fromkeys(gpu.gres_name for gpu, _mig in entries):
        group = [i for i, (gpu, _mig) in enumerate(entries) if gpu.gres_name == name]
        rows: list[tuple[int, ...]] = []
        for i in group:
            gpu, mig = entries[i]
            row = []
            for j in group:
                other, other_mig = entries[j]
                if i == j:
                    row.append(-1)
                elif mig is not None or other_mig is not None:
                    row.append(0)  # MIG devices do no peer-to-peer over NVLink (Slurm: same)
                else:
                    row.append(link_count(gpu, other))
            rows.append(tuple(row))
        if any(v > 0 for row in rows for v in row):
            for i, row in zip(group, rows, strict=True):
                out[i] = row
    return out


def _layout_warnings(inv: Inventory) -> list[str]:
    host = inv.host
    per_package: dict[int, set[int]] = {}
    for c in host.cpus:
        per_package.setdefault(c.physical_package_id, set()).add(c.core_id)
    counts = sorted({len(v) for v in per_package.values()})
    if len(counts) > 1:
        return [
            f"{host.hostname}: sockets have different online core counts ({counts}); the node "
            f"line states {host.cores_per_socket} per socket and Cores= may not fit"
        ]
    return []


def plan_gres(inv: Inventory, opts: GresOptions) -> GresPlan:
    """Decide every gres.conf device record for the inventory (no text yet)."""
    plan = GresPlan(records=[], warnings=_layout_warnings(inv))
    entries = _entries(inv, opts, plan)
    link_rows = _link_rows(entries)
    noted: set[int] = set()
    for i, (gpu, mig) in enumerate(entries):
        cores, note = gpu_cores(inv, gpu, opts)
        if mig is None:
            files: tuple[str, ...] = (gpu.device_file,)
            gtype = gpu_type(gpu, opts.gpu_types)
        else:
            files = (gpu.device_file, mig.gi_access_path or "", mig.ci_access_path or "")
            gtype = mig_type(gpu, mig, opts.mig_types)
        bad_type = GRES_TYPE.problem(gtype)
        if bad_type:
            raise InventoryError(f"{gpu.label}: GRES type from its name: {bad_type}")
        notes = (note,) if note and gpu.index not in noted else ()  # once per GPU
        noted.add(gpu.index)
        plan.records.append(
            GresRecord(
                gpu=gpu,
                mig=mig,
                gres_type=gtype,
                files=files,
                cores=cores,
                links=link_rows[i],
                notes=notes,
            )
        )
    return plan


@dataclass(frozen=True)
class GresLine:
    """One printed line: comments above it and its key=value pairs."""

    comments: tuple[str, ...]
    fields: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.fields)


def _lines(plan: GresPlan, opts: GresOptions) -> list[GresLine]:
    # with an explicit node name (or hostlist), each line says which nodes it is for, so one
    # gres.conf can hold several node types; without, the lines apply to every node
    prefix = [("NodeName", opts.node_name)] if opts.node_name else []
    lines: list[GresLine] = []
    records = plan.records
    compressible = {
        name: all(r.links is None for r in records if r.name == name)
        for name in {r.name for r in records}
    }
    done: set[int] = set()
    for i, rec in enumerate(records):
        if i in done:
            continue
        if rec.mig is not None:
            comment = (
                f"{rec.gpu.label} MIG {rec.mig.profile} gi{rec.mig.gi_id}/ci{rec.mig.ci_id} "
                f"{rec.mig.uuid}"
            )
            fields = [
                *prefix,
                ("Name", rec.name),
                ("Type", rec.gres_type),
                ("MultipleFiles", ",".join(rec.files)),
            ]
            group = [i]
        else:
            group = [i]
            if compressible[rec.name]:
                group += [
                    j
                    for j in range(i + 1, len(records))
                    if records[j].mig is None
                    and records[j].name == rec.name
                    and records[j].gres_type == rec.gres_type
                    and records[j].cores == rec.cores
                ]
            members = [records[j] for j in group]
            if len(group) == 1:
                comment = f"{rec.gpu.label} {rec.gpu.name} {rec.gpu.uuid}"
            else:
                comment = ", ".join(m.gpu.label for m in members) + f": {rec.gpu.name}"
            files = compress_hostlist(m.files[0] for m in members)
            fields = [*prefix, ("Name", rec.name), ("Type", rec.gres_type), ("File", files)]
        done.update(group)
        fields.append(("Cores", format_id_list(rec.cores)))
        if rec.links is not None:
            fields.append(("Links", ",".join(str(v) for v in rec.links)))
        notes = tuple(note for j in group for note in records[j].notes)
        lines.append(GresLine(comments=(*notes, comment), fields=tuple(fields)))
    return lines


def _shard_lines(plan: GresPlan, opts: GresOptions) -> list[GresLine]:
    if not opts.shards_per_gpu:
        return []
    prefix = (("NodeName", opts.node_name),) if opts.node_name else ()
    return [
        GresLine(
            comments=(),
            fields=(
                *prefix,
                ("Name", "shard"),
                ("Count", str(opts.shards_per_gpu)),
                ("File", r.files[0]),
            ),
        )
        for r in sorted(plan.records, key=lambda r: r.gpu.minor_number)
        if r.mig is None and r.name == "gpu"
    ]


def _devices_and_drivers(inv: Inventory) -> str:
    """`8 GPUs, driver 550.54.15` (NVIDIA only, as before) or each vendor's count and driver."""
    if all(g.vendor == VENDOR_NVIDIA for g in inv.gpus) and not inv.drivers:
        return f"{len(inv.gpus)} GPUs, driver {inv.driver_version}"
    parts = []
    for vendor in inv.vendors:
        n = sum(1 for g in inv.gpus if g.vendor == vendor)
        what = "NPUs" if vendor == VENDOR_ASCEND else "GPUs"
        if vendor == VENDOR_NVIDIA:
            driver = f"NVIDIA driver {inv.driver_version}"
        else:
            info = next((d for d in inv.drivers if d.vendor == vendor), None)
            driver = f"{vendor} driver {info.driver_version} ({info.library})" if info else vendor
        parts.append(f"{n} {vendor} {what}, {driver}")
    return "; ".join(parts)


def _header(inv: Inventory, sha256: str, opts: GresOptions, what: str) -> list[str]:
    return [
        f"{what} for {inv.host.hostname}: generated by slurmgpu {__version__} (slurmgpu gen-gres).",
        "Do not edit by hand: regenerate from the inventory instead.",
        f"Inventory: host {inv.host.hostname}, {_devices_and_drivers(inv)}, "
        f"snapshot sha256 {sha256}",
        f"Target Slurm {format_version(opts.slurm_version)}.",
    ]


def render_gres_conf(inv: Inventory, opts: GresOptions, *, inventory_sha256: str) -> str:
    """The whole gres.conf text (deterministic: same inventory and options, same bytes)."""
    plan = plan_gres(inv, opts)
    comments = _header(inv, inventory_sha256, opts, "gres.conf")
    vendors = set(inv.vendors)
    if VENDOR_NVIDIA in vendors or not vendors:
        comments.append(
            "AutoDetect=off: every GPU below is stated from the inventory. File= uses each "
            "GPU's minor number (/dev/nvidiaN), which can differ from NVML's index."
        )
    if VENDOR_AMD in vendors:
        comments.append(
            "AMD: File= is each logical GPU's DRM render node (amdsmi drm_render); /dev/kfd is "
            "shared by every job and stays out of gres.conf. Links= count XGMI links."
        )
    if VENDOR_ASCEND in vendors:
        comments.append(
            "Ascend: Name=npu File=/dev/davinciN (N = physical id). /dev/davinci_manager, "
            "/dev/devmm_svm and /dev/hisi_hdc stay out of gres.conf so every job keeps them. "
            "Slurm sets no variable for npu: the generated TaskProlog sets "
            "ASCEND_RT_VISIBLE_DEVICES. Links= count HCCS links."
        )
    if any(r.links for r in plan.records if r.gpu.vendor == VENDOR_NVIDIA):
        comments.append(
            "Links= counts NVLinks to each GPU in the order of this file (-1 = self); GPUs on "
            "one NVSwitch fabric count as fully connected. MIG devices do no NVLink P2P: 0."
        )
    if any(r.notes for r in plan.records):
        comments.append(
            "Cores= are widened to whole sockets where a GPU's affinity covers part of one: "
            "Slurm >= 24.05.5 rejects other Cores= ranges (_check_core_range_matches_sock); "
            "use --numa-as-socket with SlurmdParameters=numa_node_as_socket to keep them."
        )
    if opts.numa_as_socket:
        comments.append(
            "Cores= count NUMA nodes as sockets: slurm.conf needs "
            "SlurmdParameters=numa_node_as_socket and the node line printed with it."
        )
    partial = [w for w in plan.warnings if w.startswith("PARTIAL")]
    others = [w for w in plan.warnings if not w.startswith("PARTIAL")]
    lines, shard_lines = _lines(plan, opts), _shard_lines(plan, opts)
    text = render(
        "gres.conf.j2",
        header=comments,
        partial=partial,
        warnings=others,
        lines=lines,
        shard_lines=shard_lines,
    )
    statements = ["AutoDetect=off", *(line.text for line in [*lines, *shard_lines])]
    return check_config_lines(text, statements, "gres.conf")


def expected_records(inv: Inventory, opts: GresOptions) -> list[GresDevice]:
    """The records Slurm should hold after parsing the generated gres.conf (for --check).

    One per printed line: a `File=/dev/nvidia[0-3]` line is one record of Count=4, a MIG
    `MultipleFiles=` line one record of Count=1, a shard line Count=N.
    """
    plan = plan_gres(inv, opts)
    out = []
    for line in [*_lines(plan, opts), *_shard_lines(plan, opts)]:
        f = dict(line.fields)
        name = f["Name"]
        files = tuple(expand_hostlist(f.get("File") or f.get("MultipleFiles", "")))
        if name == "shard":
            count = int(f["Count"])
        elif "MultipleFiles" in f:
            count = 1
        else:
            count = len(files)
        # a shard's type and cores are Slurm's to fill in (from the GPU on the same file)
        cores = None if name == "shard" else tuple(parse_id_list(f.get("Cores", "")))
        gtype = None if name == "shard" else f.get("Type")
        out.append(GresDevice(name, gtype, count, files, cores, f.get("Links")))
    return out


def gres_counts(plan: GresPlan, opts: GresOptions) -> list[tuple[str, str, int]]:
    """(name, type, count) in first-appearance order, for the node line's Gres=."""
    counts: dict[tuple[str, str], int] = {}
    for r in plan.records:
        counts[(r.name, r.gres_type)] = counts.get((r.name, r.gres_type), 0) + 1
    shards = opts.shards_per_gpu * sum(1 for r in plan.records if r.mig is None and r.name == "gpu")
    out = [(name, gtype, n) for (name, gtype), n in counts.items()]
    if shards:
        out.append(("shard", "", shards))
    return out


def node_line(inv: Inventory, opts: GresOptions) -> str:
    """`NodeName=... CPUs=... Boards=1 SocketsPerBoard=... Gres=gpu:a100:8` (one line)."""
    plan = plan_gres(inv, opts)
    host = inv.host
    wrong = layout_problem(host, numa_as_socket=opts.numa_as_socket)
    if wrong:  # never a node line whose Sockets x Cores x Threads is not its CPUs
        raise InventoryError(wrong)
    sockets, per_socket = host.layout(numa_as_socket=opts.numa_as_socket)
    gres = ",".join(f"{n}:{t}:{c}" if t else f"{n}:{c}" for n, t, c in gres_counts(plan, opts))
    parts = [f"NodeName={opts.node_name or host.hostname}"]
    if opts.node_hostname:
        parts.append(f"NodeHostname={opts.node_hostname}")
    parts += [
        f"CPUs={host.cpu_count}",
        "Boards=1",
        f"SocketsPerBoard={sockets}",
        f"CoresPerSocket={per_socket}",
        f"ThreadsPerCore={host.threads_per_core}",
        f"RealMemory={host.memory_mib}",
        f"Gres={gres}",
    ]
    return " ".join(parts)


def gres_types(opts: GresOptions, inventories: Inventory | list[Inventory] | None = None) -> str:
    """`GresTypes=`: gpu, npu where an inventory has Ascend NPUs, shard with --shards-per-gpu
    (the union over several inventories for a cluster-wide file)."""
    invs = [inventories] if isinstance(inventories, Inventory) else list(inventories or [])
    names = {g.gres_name for inv in invs for g in inv.gpus} or {"gpu"}
    out = [n for n in ("gpu", "npu") if n in names]
    if opts.shards_per_gpu and "gpu" in names:
        out.append("shard")
    return ",".join(out)


def render_node_conf(inv: Inventory, opts: GresOptions, *, inventory_sha256: str) -> str:
    """The slurm.conf pieces: `GresTypes=` and the `NodeName=` line, with a header."""
    notes = []
    if opts.numa_as_socket:
        notes.append(
            "Sockets are NUMA nodes: set SlurmdParameters=numa_node_as_socket "
            "(needs hwloc 2) so slurmd agrees with this layout."
        )
    line = node_line(inv, opts)
    text = render(
        "slurm-node.conf.j2",
        header=_header(inv, inventory_sha256, opts, "slurm.conf node definition"),
        notes=notes,
        gres_types=gres_types(opts, inv),
        node_line=line,
    )
    return check_config_lines(text, [f"GresTypes={gres_types(opts, inv)}", line], "node line")


def plan_warnings(inv: Inventory, opts: GresOptions) -> list[str]:
    """What gen-gres prints on stderr for this inventory (partial, MIG without devices)."""
    return [*inv.warnings, *plan_gres(inv, opts).warnings]


def npu_logical_ids(inv: Inventory, opts: GresOptions) -> list[int]:
    """The logical ids of the node's NPUs in gres.conf order (Slurm's npu index -> id)."""
    return [r.gpu.index for r in plan_gres(inv, opts).records if r.name == "npu"]


def render_task_prolog(inventories: list[Inventory], opts: GresOptions) -> str:
    """The TaskProlog that sets ASCEND_RT_VISIBLE_DEVICES from the job's npu allocation.

    One `case` arm per node type (nodes with the same id order share one hostlist-free
    pattern list `a|b`); nodes without NPUs are left out (the script exits 0 there).
    """
    by_ids: dict[str, list[str]] = {}
    for inv in inventories:
        ids = npu_logical_ids(inv, opts)
        if ids:
            by_ids.setdefault(" ".join(map(str, ids)), []).append(inv.node_name)
    if not by_ids:
        raise UsageError("--task-prolog: no Ascend NPU in the inventory (nothing to map)")
    header = [
        f"TaskProlog for Ascend NPUs: generated by slurmgpu {__version__} "
        "(slurmgpu gen-gres --task-prolog).",
        "Do not edit by hand: regenerate from the inventory instead.",
    ]
    nodes = []
    for ids, names in by_ids.items():
        names = list(expand_hostlist(opts.node_name)) if opts.node_name else names
        nodes.append(("|".join(names), ids))
    return render("task-prolog-npu.sh.j2", header=header, nodes=nodes)
