"""`mig apply`: take one Slurm node from its layout to a planned one, journaled, undoable.

Slurm cannot change MIG layouts itself, and a node whose GRES shrinks behind slurmctld's back
goes INVAL/DRAINED. So the steps are, in order (each recorded in a JSON journal before the
next starts):

  drain -> wait_jobs (timeout; jobs of preemptible QOS are requeued) -> save_old ->
  stop_slurmd -> apply_layout (mig-parted when installed, else NVML) -> inventory ->
  write_gres (gres.conf validated + atomic; in a cluster-wide gres.conf only this node's
  lines change) -> reconfigure (slurm.conf node line + `scontrol reconfigure` or the
  controller restart command, when the node's Gres changes) -> start_slurmd -> verify
  (scontrol shows the new Gres) -> resume

Slurm 25.11's slurmd unloads its gpu plugin once configured and holds no NVML handle while it
runs (unless GPU energy accounting, `AcctGatherEnergyType=acct_gather_energy/gpu`, polls
NVML): there `stop_slurmd` leaves slurmd running through the MIG change (the node keeps
answering slurmctld, drained) and `start_slurmd` restarts it, since slurmd reads the devices
only at start. Older releases keep NVML open in slurmd: it is stopped first
(`slurmd_holds_nvml`; the journal's `slurmd_kept_running` says which was done).

On a failure the steps already taken are undone in reverse (slurmd stopped again if it was
started, old layout through NVML, old gres.conf/slurm.conf, reconfigure, slurmd started) and
the node is drained with a reason that names the failed step (also when the failed step was
the drain itself: a second try usually gets through). A crash leaves the journal: `recover`
finishes a run that got as far as starting slurmd, and rolls back any other, once the journal
has passed `util.journal`'s checks (`Journal.check`); journal text is written back only after
the checks a fresh file gets. A run holds the node's lock (`util.lock`). `preview` says what a
run would do (`--dry-run`, `--emit DIR`) without touching anything.
"""

from __future__ import annotations

import re
import shlex
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurmgpu.errors import SlurmgpuError, UsageError
from slurmgpu.model.catalog import GpuModel
from slurmgpu.model.inventory import Inventory
from slurmgpu.model.mig_layout import Layout, place

_NODE_NAME = re.compile(r"(?i)NodeName=(\S+)")
# slurmd releases NVML after its start from this release (25.11 release notes: the gpu plugin
# is unloaded after configuration unless GPU energy accounting is on)
NVML_RELEASED_SINCE = (25, 11)


def slurmd_holds_nvml(slurm_version: Sequence[int] | None, energy_type: str | None) -> bool:
    """Whether a running slurmd keeps NVML open, so a MIG change must stop it first.

    Unknown version or energy plugin: yes (stopping is always safe, only slower).
    """
    if slurm_version is None or tuple(slurm_version[:2]) < NVML_RELEASED_SINCE:
        return True
    return energy_type is None or "gpu" in energy_type


STEPS = (
    "drain",
    "wait_jobs",
    "save_old",
    "stop_slurmd",
    "apply_layout",
    "inventory",
    "write_gres",
    "reconfigure",
    "start_slurmd",
    "verify",
    "resume",
)


class MigApplyFailed(SlurmgpuError):
    """`mig apply` stopped; the node is drained and (where it got that far) rolled back."""


@dataclass(frozen=True)
class ApplyOptions:
    """Everything `slurmgpu mig apply` takes (the CLI options map one to one)."""

    node: str
    config_name: str
    config_file: Path
    gres_conf: Path
    slurm_conf: Path | None = None  # the file holding `NodeName=<node> ...` (None: not kept)
    journal_dir: Path = Path("/var/lib/slurmgpu")
    host_root: str = "/"
    drain_timeout_s: float = 3600.0
    poll_s: float = 10.0
    requeue_qos: tuple[str, ...] = ()  # QOS whose jobs are requeued, not waited for
    stop_slurmd: tuple[str, ...] = ("systemctl", "stop", "slurmd")
    start_slurmd: tuple[str, ...] = ("systemctl", "start", "slurmd")
    mig_parted: str = "nvidia-mig-parted"
    # run instead of `scontrol reconfigure` when the node's Gres changes: Slurm 22.05 refuses
    # a new gres/gpu count for a node with File= on reconfigure ("Attempt to change gres/gpu
    # Count on node N from 17 to 24 invalid with File configuration", seen on the test
    # cluster); restarting slurmctld applies it (e.g. `ssh ctl systemctl restart slurmctld`)
    restart_slurmctld: tuple[str, ...] = ()
    verify_timeout_s: float = 60.0
    env: Mapping[str, str] | None = None
    gres_options: Any = None  # render.gres.GresOptions (default: its defaults + node name)

    @property
    def journal(self) -> Path:
        return self.journal_dir / f"mig-apply-{self.node}.json"


STATES = ("running", "done", "rolled-back", "failed")
# the release before write_gres/reconfigure were two steps journaled one `write_config`
_LEGACY_STEPS = {"write_config": ("write_gres", "reconfigure")}


@dataclass
class Journal:
    """What has been done, and what is needed to undo it (JSON on disk after every step,
    through `slurmgpu.util.journal`: sealed with its checksum, validated when read back)."""

    node: str
    config_name: str
    done: list[str] = field(default_factory=list)
    state: str = "running"  # running | done | rolled-back | failed
    old_layout: dict[str, list[list[Any]] | None] = field(default_factory=dict)
    old_gres_conf: str | None = None
    old_slurm_conf: str | None = None
    node_line_changed: bool = False
    expected_gres: str = ""
    requeued: list[str] = field(default_factory=list)
    error: str = ""
    # stop_slurmd left slurmd running (25.11+: it holds no NVML handle); start_slurmd restarts
    slurmd_kept_running: bool = False

    def steps_done(self) -> list[str]:
        return [s for step in self.done for s in _LEGACY_STEPS.get(step, (step,))]

    def check(self) -> str | None:
        """What makes no sense in this journal (None: nothing), for `util.journal`."""
        if self.state not in STATES:
            return f"state {self.state!r:.40} is none of {', '.join(STATES)}"
        done = self.steps_done()
        if done != list(STEPS[: len(done)]):
            return f"steps done {self.done!r:.120} are not the workflow's steps in order"
        if self.state == "done" and len(done) != len(STEPS):
            return f"state done, but only {len(done)} of {len(STEPS)} steps were done"
        if self.state in ("rolled-back", "failed") and not self.error:
            return f"state {self.state} without the error that caused it"
        if "save_old" in done and not self.old_layout:
            return "save_old done but no old layout recorded"
        for gpu, slices in self.old_layout.items():
            if not gpu.isdigit():
                return f"old layout of GPU {gpu!r:.20}: not a GPU index"
            for item in slices or []:
                if not (len(item) == 2 and isinstance(item[0], str) and type(item[1]) is int):
                    return f"old layout of GPU {gpu}: {item!r:.40} is not [profile, start]"
        if "write_gres" in done and not self.expected_gres:
            return "write_gres done but no expected Gres recorded"
        return None

    def save(self, path: Path) -> None:
        from slurmgpu.util.journal import write_record

        write_record(path, self)

    @classmethod
    def load(cls, path: Path, node: str | None = None) -> Journal:
        """The journal at `path`, validated (one JournalError line when it cannot be trusted):
        sealed (a hand-made journal without its checksum is never acted from, whatever
        `--no-check` skips), well-formed, of `node`."""
        from slurmgpu.util.journal import JournalError, read_record

        journal = read_record(path, cls, sealed_only=True)
        if node is not None and journal.node != node:
            raise JournalError(f"journal {path} is of node {journal.node!r:.40}, not {node}")
        return journal


@dataclass(frozen=True)
class ApplyPreview:
    """What `mig apply` would do to a node: its steps in words and its file changes."""

    node: str
    config_name: str
    steps: tuple[str, ...]
    changes: tuple[Any, ...]  # util.emit.FileChange: gres.conf, and slurm.conf when it changes
    relaid: tuple[int, ...] = ()  # the GPUs whose layout (MIG mode, slices) the run changes

    @property
    def changed(self) -> bool:
        """A run would change the node: a GPU's layout, gres.conf or slurm.conf."""
        return bool(self.relaid) or any(c.changed for c in self.changes)

    def text(self) -> str:
        """The `--dry-run` output: the steps, then each file's unified diff."""
        lines = [f"# mig apply {self.config_name} on {self.node}: dry run, nothing changed"]
        lines += [f"{n}. {step}" for n, step in enumerate(self.steps, 1)]
        body = "\n".join(lines) + "\n"
        for change in self.changes:
            body += change.diff() or f"# {change.path}: unchanged\n"
        return body


# -- the mig-parted config ---------------------------------------------------------------------
def target_layouts(config_file: Path, config_name: str, inv: Inventory) -> dict[int, Layout | None]:
    """{GPU index: layout or None (whole)} for config `config_name` of a mig-parted file."""
    import yaml

    try:
        doc = yaml.safe_load(Path(config_file).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"--config-file {config_file}: {exc}") from None
    configs = (doc or {}).get("mig-configs") or {}
    if config_name not in configs:
        known = ", ".join(sorted(configs)) or "none"
        raise UsageError(f"--config {config_name}: not in {config_file} (configs: {known})")
    out: dict[int, Layout | None] = {}
    for entry in configs[config_name]:
        devices = entry.get("devices", "all")
        indices = [g.index for g in inv.gpus] if devices == "all" else list(devices)
        filters = entry.get("device-filter")
        filters = [filters] if isinstance(filters, str) else (filters or [])
        for gpu in inv.gpus:
            if gpu.index not in indices:
                continue
            model = gpu.model
            if filters and (model is None or model.pci_device_id.lower() not in _lower(filters)):
                continue
            out[gpu.index] = _layout_for(gpu.index, model, entry)
    missing = [g.index for g in inv.gpus if g.index not in out]
    if missing:
        raise UsageError(f"--config {config_name}: says nothing about GPU(s) {missing}")
    return out


def _lower(items: Sequence[str]) -> set[str]:
    return {str(i).lower() for i in items}


def _layout_for(index: int, model: GpuModel | None, entry: Mapping[str, Any]) -> Layout | None:
    if not entry.get("mig-enabled"):
        return None
    if model is None or not model.supports_mig:
        raise UsageError(f"GPU {index}: MIG asked for a GPU that has no MIG")
    counts = {str(k): int(v) for k, v in (entry.get("mig-devices") or {}).items()}
    layout = place(model, counts)
    if layout is None:
        raise UsageError(f"GPU {index}: {counts} does not fit one {model.key}")
    return layout


# -- the workflow --------------------------------------------------------------------------------
class MigApply:
    """One run of the workflow; `slurm` is a SlurmNodeControl, `nvml` opens an NvmlMig."""

    def __init__(
        self,
        opts: ApplyOptions,
        *,
        slurm=None,
        nvml_factory: Callable[[], Any] | None = None,
        read_inventory: Callable[[], Inventory] | None = None,
        validate_gres: Callable[[str, str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from slurmgpu.sources.mig_nvml import NvmlMig
        from slurmgpu.sources.slurm_node_control import SlurmNodeControl

        self.opts = opts
        self.slurm = slurm or SlurmNodeControl(opts.env)
        self.nvml_factory = nvml_factory or NvmlMig
        self.read_inventory = read_inventory or self._live_inventory
        self.validate_gres = validate_gres
        self.sleep, self.clock = sleep, clock
        self.journal = Journal(opts.node, opts.config_name)
        self.inv: Inventory | None = None
        self.targets: dict[int, Layout | None] = {}

    def _live_inventory(self) -> Inventory:
        from slurmgpu.sources import nvml

        return nvml.read_inventory(self.opts.host_root)

    def _save(self) -> None:
        self.journal.save(self.opts.journal)

    # each step -------------------------------------------------------------------------------
    def drain(self) -> None:
        reason = f"slurmgpu mig apply {self.opts.config_name}"
        self.slurm.drain(self.opts.node, reason)

    def wait_jobs(self) -> None:
        deadline = self.clock() + self.opts.drain_timeout_s
        while True:
            jobs = self.slurm.jobs_on(self.opts.node)
            for job in jobs:
                if job.qos in self.opts.requeue_qos and job.job_id not in self.journal.requeued:
                    self.slurm.requeue(job.job_id)
                    self.journal.requeued.append(job.job_id)
                    self._save()
            if not jobs:
                return
            if self.clock() >= deadline:
                ids = " ".join(j.job_id for j in jobs)
                raise MigApplyFailed(
                    f"jobs still running after {self.opts.drain_timeout_s:g} s: {ids}"
                )
            self.sleep(self.opts.poll_s)

    def save_old(self) -> None:
        self.inv = self.read_inventory()
        self.targets = target_layouts(self.opts.config_file, self.opts.config_name, self.inv)
        nv = self.nvml_factory()
        try:
            for gpu in self.inv.gpus:
                model = gpu.model
                if gpu.mig_enabled and model is not None:
                    self.journal.old_layout[str(gpu.index)] = [
                        list(x) for x in nv.profile_names(gpu.index, model)
                    ]
                else:
                    self.journal.old_layout[str(gpu.index)] = None
        finally:
            nv.close()
        self.journal.old_gres_conf = _read(self.opts.gres_conf)
        if self.opts.slurm_conf is not None:
            self.journal.old_slurm_conf = _read(self.opts.slurm_conf)

    def stop_slurmd(self) -> None:
        if not self._slurmd_holds_nvml():
            self.journal.slurmd_kept_running = True  # start_slurmd restarts it instead
            self._save()
            return
        self.slurm.run_command(self.opts.stop_slurmd)

    def _slurmd_holds_nvml(self) -> bool:
        version = getattr(self.opts.gres_options, "slurm_version", None)
        if not slurmd_holds_nvml(version, ""):
            try:
                energy = self.slurm.config_value("AcctGatherEnergyType")
            except SlurmgpuError:
                energy = None  # cannot tell: stop slurmd, as on older releases
            return slurmd_holds_nvml(version, energy)
        return True

    def apply_layout(self) -> None:
        parted = shutil.which(self.opts.mig_parted) if self.opts.mig_parted else None
        if parted:
            argv = [parted, "apply", "-f", str(self.opts.config_file), "-c", self.opts.config_name]
            self.slurm.run_command(argv, timeout=900)
            return
        assert self.inv is not None
        nv = self.nvml_factory()
        try:
            for gpu in self.inv.gpus:
                nv.apply(gpu.index, gpu.model, self.targets[gpu.index])
        finally:
            nv.close()

    def inventory(self) -> None:
        self.inv = self.read_inventory()
        for gpu in self.inv.gpus:
            want = self.targets.get(gpu.index)
            have = sorted(m.profile for m in gpu.mig_devices) if gpu.mig_enabled else []
            planned = sorted(p.profile.name for p in want.placements) if want else []
            if have != planned:
                raise MigApplyFailed(f"GPU {gpu.index} shows {have or 'whole'}, not {planned}")

    def new_gres_conf(self, inv: Inventory, old: str | None) -> tuple[str, str]:
        """(the gres.conf to write, the node line) for `inv`, the node's GPUs after the layout."""
        from slurmgpu.render import gres
        from slurmgpu.sources.snapshot import inventory_sha256

        opts = self.opts.gres_options or gres.GresOptions()
        if opts.node_name is None:
            opts = replace(opts, node_name=self.opts.node)
        text = gres.render_gres_conf(inv, opts, inventory_sha256=inventory_sha256(inv))
        return merge_node_gres(old, self.opts.node, text), gres.node_line(inv, opts)

    def write_gres(self) -> None:
        from slurmgpu.util.atomic import write_atomic

        assert self.inv is not None
        text, line = self.new_gres_conf(self.inv, self.journal.old_gres_conf)
        self.journal.expected_gres = line.rsplit("Gres=", 1)[1]
        self._save()
        validate = self.validate_gres

        def check(tmp: Path) -> None:
            if validate is not None:
                validate(Path(tmp).read_text(encoding="utf-8"), line)

        write_atomic(self.opts.gres_conf, text, validate=check)

    def reconfigure(self) -> None:
        from slurmgpu.util.atomic import write_atomic

        if self.opts.slurm_conf is None or self.journal.old_slurm_conf is None:
            return
        new_conf, changed = replace_node_gres(
            self.journal.old_slurm_conf, self.opts.node, self.journal.expected_gres
        )
        if changed:
            self.journal.node_line_changed = True
            self._save()
            write_atomic(self.opts.slurm_conf, new_conf)
            self._reload_controller()

    def _reload_controller(self) -> None:
        if self.opts.restart_slurmctld:
            self.slurm.run_command(self.opts.restart_slurmctld)
            # a drain set moments before a restart can be lost with the unsaved node state
            # (seen on the test cluster): set it again so no job lands before `verify`
            self.drain()
        else:
            self.slurm.reconfigure()

    def start_slurmd(self) -> None:
        if self.journal.slurmd_kept_running:
            # slurmd ran through the change: it sees the new devices only from a new start
            self.slurm.run_command(self.opts.stop_slurmd)
        self.slurm.run_command(self.opts.start_slurmd)

    def verify(self) -> None:
        """Wait until slurmctld shows the new Gres *and* the restarted slurmd has registered.

        Gres= alone comes from slurm.conf, so it matches before slurmd answers; a RESUME then
        is refused ("Invalid node state specified": the node is still UNKNOWN after a
        controller restart, seen on the multi-node test cluster). A slurmd that reports fewer
        GPUs than configured gets INVALID_REG: that fails at once, with Slurm's reason.
        """
        self._wait_for_gres(self.journal.expected_gres)

    def _wait_for_gres(self, expected: str) -> None:
        """Until slurmctld shows Gres `expected` for the node and its slurmd has registered."""
        from slurmgpu.sources.slurm import parse_gres_string

        want = _gres_set(parse_gres_string(expected))
        deadline = self.clock() + self.opts.verify_timeout_s
        while True:
            record = self.slurm.node_record(self.opts.node)
            have = _gres_set(parse_gres_string(record.get("Gres", "")))
            flags = set(record.get("State", "").split("+"))
            if "INVALID_REG" in flags:
                raise MigApplyFailed(
                    f"slurmctld refused the node's registration: {record.get('Reason', '?')}"
                )
            registered = not ({"UNKNOWN", "NOT_RESPONDING", "DOWN"} & flags)
            if have == want and registered:
                return
            if self.clock() >= deadline:
                if have == want:
                    raise MigApplyFailed(
                        f"slurmd did not register in {self.opts.verify_timeout_s:g} s "
                        f"(State={record.get('State', '?')})"
                    )
                raise MigApplyFailed(
                    f"scontrol shows Gres={record.get('Gres', '?')}, expected {expected}"
                )
            self.sleep(min(self.opts.poll_s, 2.0))

    def resume(self) -> None:
        state = self.slurm.node_record(self.opts.node).get("State", "")
        if "DRAIN" in state or "DOWN" in state:
            self.slurm.resume(self.opts.node)

    # what a run would do (--dry-run, --emit) -------------------------------------------------
    def preview(self) -> ApplyPreview:
        """The steps and file changes of a run, from the node as it is now; nothing changed
        (the same checks as a run first: config, shared gres.conf lines, GresTypes)."""
        from slurmgpu.mig.preview import planned_devices
        from slurmgpu.util.emit import FileChange

        self.prepare()
        assert self.inv is not None
        inv = self.inv
        gpus = tuple(
            replace(g, mig_mode_current=False, mig_mode_pending=False, mig_devices=())
            if self.targets[g.index] is None
            else replace(
                g,
                mig_mode_current=True,
                mig_mode_pending=True,
                mig_devices=_in_nvml_order(planned_devices(inv, g, self.targets[g.index])),
            )
            for g in inv.gpus
        )
        relaid = tuple(g.index for g in inv.gpus if _relaid(g, self.targets[g.index]))
        planned = replace(inv, gpus=gpus, warnings=(), generator=f"{inv.generator} + mig apply")
        if not relaid:  # the GPUs stay as they are: the run writes gres.conf from them as read
            planned = inv
        o = self.opts
        old_gres = _read(o.gres_conf)
        gres_text, line = self.new_gres_conf(planned, old_gres)
        gres_now = line.rsplit("Gres=", 1)[1]
        if self.validate_gres is not None:
            self.validate_gres(gres_text, line)
        changes = [FileChange(o.gres_conf, gres_text, old_gres)]
        reload = "`scontrol reconfigure`"
        if o.restart_slurmctld:
            reload = f"`{shlex.join(o.restart_slurmctld)}` (then drain {o.node} again)"
        node_step = f"reconfigure: {o.slurm_conf or 'slurm.conf'} unchanged (no --slurm-conf)"
        old_conf = _read(o.slurm_conf) if o.slurm_conf is not None else None
        if o.slurm_conf is not None and old_conf is not None:
            new_conf, changed = replace_node_gres(old_conf, o.node, gres_now)
            node_step = f"reconfigure: NodeName={o.node} already has Gres={gres_now}"
            if changed:
                changes.append(FileChange(o.slurm_conf, new_conf, old_conf))
                node_step = (
                    f"reconfigure: NodeName={o.node} Gres={gres_now} in {o.slurm_conf}, {reload}"
                )
        parted = shutil.which(o.mig_parted) if o.mig_parted else None
        how = (
            f"`{parted} apply -f {o.config_file} -c {o.config_name}`"
            if parted
            else "through NVML: "
            + "; ".join(
                f"GPU {i}: {_describe(layout)}" for i, layout in sorted(self.targets.items())
            )
        )
        requeue = f", requeue jobs of QOS {','.join(o.requeue_qos)}" if o.requeue_qos else ""
        steps = (
            f"drain: scontrol update NodeName={o.node} State=DRAIN "
            f'Reason="slurmgpu mig apply {o.config_name}"',
            f"wait_jobs: until no job runs on {o.node} (at most {o.drain_timeout_s:g} s{requeue})",
            f"save_old: the old layout, gres.conf and slurm.conf into {o.journal}",
            f"stop_slurmd: `{shlex.join(o.stop_slurmd)}`",
            f"apply_layout: {how}",
            "inventory: NVML shows the planned slices",
            f"write_gres: {o.gres_conf}"
            + (" (checked with slurmd -G)" if self.validate_gres else ""),
            node_step,
            f"start_slurmd: `{shlex.join(o.start_slurmd)}`",
            f"verify: scontrol shows {o.node} Gres={gres_now}, slurmd registered",
            f"resume: scontrol update NodeName={o.node} State=RESUME",
        )
        return ApplyPreview(o.node, o.config_name, steps, tuple(changes), relaid)

    # running and undoing ---------------------------------------------------------------------
    def prepare(self) -> None:
        """Check the config against the node before anything changes (errors: nothing done)."""
        self.inv = self.read_inventory()
        self.targets = target_layouts(self.opts.config_file, self.opts.config_name, self.inv)
        merge_node_gres(_read(self.opts.gres_conf), self.opts.node, "")  # refuses shared lines
        if any(layout is not None for layout in self.targets.values()):
            types = self.slurm.gres_types()
            if "shard" in types.split(","):
                # seen on the multi-node test cluster (22.05): the node registers with the
                # right counts, but jobs for its second and later GPU types get nothing
                # (`gpu:2g.10gb:0(IDX:)`); gen-gres refuses shards with MIG for the same reason
                raise UsageError(
                    f"the controller has GresTypes={types}: with shard, Slurm splits MIG "
                    "records into one GPU per file and jobs get no slices; set GresTypes=gpu "
                    "first (docs/mig.md)"
                )

    def run(self, steps: Sequence[str] = STEPS) -> Journal:
        """Run `steps` in order; on a failure roll back and raise MigApplyFailed."""
        if not self.journal.done:
            self.prepare()
        self._save()
        for step in steps:
            if step in self.journal.done:
                continue
            try:
                getattr(self, step)()
            except Exception as exc:  # any failure, ours or NVML's: undo, leave drained
                self.journal.error = f"{step}: {exc}"
                self._save()
                notes = self.rollback()
                detail = f"; rollback: {'; '.join(notes)}" if notes else ""
                raise MigApplyFailed(
                    f"{self.opts.node}: mig apply failed at {step}: {exc}; node left drained"
                    + detail
                ) from None
            self.journal.done.append(step)
            self._save()
        if all(step in self.journal.done for step in STEPS):
            self.journal.state = "done"
            self._save()
        return self.journal

    def rollback(self) -> list[str]:
        """Undo what the journal says was done; return what could not be undone."""

        j, problems = self.journal, []
        started = set(j.done) | {j.error.split(":", 1)[0]}
        if "write_config" in started:  # a journal of the release that had one step for both
            started |= {"write_gres", "reconfigure"}

        def attempt(what: str, fn: Callable[[], None]) -> None:
            try:
                fn()
            except Exception as exc:  # keep undoing the rest; report what failed
                problems.append(f"{what}: {exc}")

        if "start_slurmd" in j.done:
            # slurmd holds the GPUs: MIG changes need it gone; and (25.11+, where it holds
            # none) it runs with the new gres.conf and would register that with the controller
            # while the old config is put back (seen on the 25.11 test cluster)
            attempt("stop slurmd", lambda: self.slurm.run_command(self.opts.stop_slurmd))
        if "apply_layout" in started:
            attempt("restore the old MIG layout", self._restore_layout)
        if "write_gres" in started and j.old_gres_conf is not None:
            attempt("restore gres.conf", self._restore_gres_conf)
        slurm_conf, old_conf = self.opts.slurm_conf, j.old_slurm_conf
        if "reconfigure" in started and j.node_line_changed and slurm_conf and old_conf:
            attempt("restore slurm.conf", lambda: self._restore_slurm_conf(slurm_conf, old_conf))
            attempt("reload slurmctld", self._reload_controller)
        if "stop_slurmd" in started:
            attempt("start slurmd", self.start_slurmd)
        old_gres = _node_gres(old_conf, self.opts.node) if old_conf else None
        if "reconfigure" in started and j.node_line_changed and old_gres:
            # 24.11+ keep the node's registered Gres across a controller restart until its
            # slurmd registers again (seen on the test clusters: the new Gres still shown
            # after the old slurm.conf was back); 22.05 took slurm.conf's at once
            attempt("slurmctld back on the old Gres", lambda: self._wait_for_gres(old_gres))
        # also when the drain itself failed (slurmctld busy): no job may land on a node whose
        # re-layout broke off; if this drain fails too, the error says so
        # one line, no `=`: `scontrol show node` prints Reason= last, and a `key=value` in
        # it (a failed command's arguments) would read as a later field
        reason = " ".join(f"slurmgpu mig apply failed at {j.error}".replace("=", ":").split())
        reason = reason[:200]
        attempt("drain with reason", lambda: self.slurm.drain(self.opts.node, reason))
        j.state = "failed" if problems else "rolled-back"
        self._save()
        return problems

    def _restore_gres_conf(self) -> None:
        """The old gres.conf back, checked as a fresh one is (journal text is never written
        blind): gres.conf statements that describe this node's GPUs, accepted by `slurmd -G`
        with the old node line (unless --no-check)."""
        from slurmgpu.util.atomic import write_atomic

        text = self.journal.old_gres_conf or ""
        problem = gres_conf_problem(text, self.opts.node)
        if problem:
            raise MigApplyFailed(f"the journal's old gres.conf {problem}: not written")
        old_line = _node_line(self.journal.old_slurm_conf, self.opts.node)
        if self.validate_gres is not None and old_line is not None:
            self.validate_gres(text, old_line)
        write_atomic(self.opts.gres_conf, text, backup=False)

    def _restore_slurm_conf(self, path: Path, text: str) -> None:
        """The old slurm.conf back, once it holds this node's line (never blind)."""
        from slurmgpu.util.atomic import write_atomic

        if _node_line(text, self.opts.node) is None:
            raise MigApplyFailed(
                f"the journal's old slurm.conf has no NodeName={self.opts.node} line: not written"
            )
        write_atomic(path, text, backup=False)

    def _restore_layout(self) -> None:
        inv = self.inv or self.read_inventory()
        nv = self.nvml_factory()
        try:
            for gpu in inv.gpus:
                old = self.journal.old_layout.get(str(gpu.index))
                model = gpu.model
                layout = None
                if old is not None and model is not None:
                    layout = _placed(model, [(str(n), int(s)) for n, s in old])
                nv.apply(gpu.index, model, layout)
        finally:
            nv.close()


def _relaid(gpu: Any, target: Layout | None) -> bool:
    """Whether applying `target` changes `gpu`: its MIG mode, or the slices it has (each
    target slice one full compute instance, as `apply_layout` creates them)."""
    if target is None:
        return bool(gpu.mig_mode_current or gpu.mig_mode_pending or gpu.mig_devices)
    if not gpu.mig_mode_current:
        return True
    have = sorted(d.profile for d in gpu.mig_devices)
    return have != sorted(p.profile.name for p in target.placements)


def _in_nvml_order(devices: tuple[Any, ...]) -> tuple[Any, ...]:
    """Planned MIG devices in the order NVML enumerates created ones: by GPU-instance id
    (as the recorded machines show), so the emitted gres.conf lists them as the live run's."""
    ordered = sorted(devices, key=lambda d: (d.gi_id, d.ci_id))
    return tuple(replace(d, index=i) for i, d in enumerate(ordered))


def _describe(layout: Layout | None) -> str:
    if layout is None:
        return "whole (MIG off)"
    names = sorted(p.profile.name for p in layout.placements)
    return " + ".join(f"{names.count(n)} x {n}" for n in sorted(set(names)))


def _placed(model: GpuModel, instances: list[tuple[str, int]]) -> Layout:
    from slurmgpu.model.mig_layout import Placement

    placements = []
    for name, start in instances:
        profile = model.profile(name)
        if profile is None:
            raise MigApplyFailed(f"old layout has {name}, unknown to {model.key}")
        placements.append(Placement(start, profile))
    return Layout(model.key, tuple(sorted(placements)))


_GRES_KEYS = (
    "Name",
    "NodeName",
    "AutoDetect",
    "Type",
    "File",
    "Files",
    "Count",
    "Cores",
)  # and Flags=, Links=...


def gres_conf_problem(text: str, node: str) -> str | None:
    """What makes `text` no gres.conf for `node`'s GPUs (None: it is one)."""
    statements = [ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip()[0] != "#"]
    for ln in statements:
        for word in ln.split():
            key, sep, value = word.partition("=")
            if (
                not sep
                or not value
                or not (key in _GRES_KEYS or (key.isalpha() and key[0].isupper()))
            ):
                return f"has a line that is no gres.conf statement ({ln[:60]!r})"
    ours = [ln for ln in statements if (_gres_nodes(ln) is None or node in _gres_nodes(ln))]
    if not any("Name=gpu" in ln.split() for ln in ours):
        return f"has no Name=gpu line for {node}"
    return None


def _node_line(conf: str | None, node: str) -> str | None:
    for line in (conf or "").splitlines():
        if line.split()[:1] == [f"NodeName={node}"]:
            return line.strip()
    return None


def _gres_set(items) -> set[tuple[str, str | None, int]]:
    return {(i.name, i.type, i.count) for i in items}


def _read(path: Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _gres_nodes(line: str) -> list[str] | None:
    """The nodes a gres.conf statement is for (None: every node, it names none)."""
    from slurmgpu.util.hostlist import expand_hostlist

    m = _NODE_NAME.match(line.strip())
    return expand_hostlist(m.group(1)) if m else None


def merge_node_gres(old: str | None, node: str, new: str) -> str:
    """The gres.conf to write: `new` alone, or in a cluster-wide file the other nodes' lines
    kept byte for byte with `node`'s statements replaced by `new`'s `NodeName=` lines.

    A cluster-wide file (configless Slurm hands every node the same one) is recognised by
    statements naming other nodes. A statement naming `node` together with others cannot be
    changed for one node alone: that is refused before anything is touched (`prepare`).
    """
    statements = [
        (ln, _gres_nodes(ln)) for ln in (old or "").splitlines() if ln.strip() and ln[0] != "#"
    ]
    if not any(nodes and node not in nodes for ln, nodes in statements):
        return new  # this node's own file
    for ln, nodes in statements:
        if nodes and node in nodes and len(set(nodes)) > 1:
            raise UsageError(
                f"gres.conf line {ln.strip()!r} is shared by {node} and other nodes: give "
                f"{node} lines of its own first (slurmgpu gen-gres --cluster)"
            )
    assert old is not None
    header = f"# {node}: written by slurmgpu mig apply (the other lines: as they were)"
    kept = [ln for ln in old.splitlines() if _gres_nodes(ln) != [node] and ln != header]
    while kept and not kept[-1].strip():
        kept.pop()
    ours = [ln for ln in new.splitlines() if _gres_nodes(ln) == [node]]
    return "\n".join([*kept, "", header, *ours]) + "\n"


def _node_gres(conf: str, node: str) -> str | None:
    """`Gres=` of the `NodeName=<node>` line of slurm.conf text (None: no such line/key)."""
    for line in conf.splitlines():
        words = line.split()
        if words and words[0] == f"NodeName={node}":
            return next((w[len("Gres=") :] for w in words if w.startswith("Gres=")), None)
    return None


def replace_node_gres(conf: str, node: str, gres: str) -> tuple[str, bool]:
    """slurm.conf text with `Gres=` of the `NodeName=<node>` line set; (text, changed)."""
    out, changed, found = [], False, False
    for line in conf.splitlines(keepends=True):
        words = line.split()
        if words and words[0] == f"NodeName={node}":
            found = True
            body = line.rstrip("\n")
            parts = [w for w in body.split() if not w.startswith("Gres=")]
            new = " ".join([*parts, f"Gres={gres}"]) + "\n"
            changed = changed or new.split() != body.split()
            line = new
        out.append(line)
    if not found:
        raise MigApplyFailed(f"no NodeName={node} line in slurm.conf to update")
    return "".join(out), changed


def _lock(opts: ApplyOptions, what: str):
    """The node's lock in the one lock directory every acting command shares."""
    from slurmgpu.util.lock import lock_dir, node_locks

    return node_locks(lock_dir(), [opts.node], what)


def apply_config(
    opts: ApplyOptions,
    *,
    recheck: Callable[[], Sequence[str | None]] | None = None,
    **kwargs: Any,
) -> Journal:
    """`slurmgpu mig apply`: run the workflow for one node, holding the node's lock (another
    command holding it: waited for a bounded time, then refused), refusing a pending journal.
    `recheck` (the caller's guardrails, read again under the lock before anything is done):
    any reason it gives refuses the run, nothing touched."""
    with _lock(opts, f"mig apply {opts.config_name}"):
        why = [w for w in (recheck() if recheck is not None else ()) if w]
        if why:
            raise MigApplyFailed(f"{opts.node}: not changed: {'; '.join(why)}")
        if opts.journal.exists():
            pending = Journal.load(opts.journal, opts.node)
            if pending.state == "running":
                raise UsageError(
                    f"{opts.journal}: a previous mig apply of {pending.node} did not finish; "
                    "run `slurmgpu mig apply --recover` first"
                )
        return MigApply(opts, **kwargs).run()


def recover(opts: ApplyOptions, **kwargs: Any) -> Journal:
    """`mig apply --recover`: finish a run that started slurmd, else roll it back (the journal
    validated first: a corrupted or nonsense one is an error, nothing is done from it)."""
    return recover_run(opts, **kwargs)[0]


def recover_run(opts: ApplyOptions, **kwargs: Any) -> tuple[Journal, bool]:
    """`recover`, and whether it acted: False when the journal was not pending (a finished,
    rolled-back or failed run: nothing done), True when it finished or rolled one back."""
    with _lock(opts, "mig apply --recover"):
        if not opts.journal.exists():
            raise UsageError(f"no journal at {opts.journal}: nothing to recover")
        journal = Journal.load(opts.journal, opts.node)
        if journal.state != "running":
            return journal, False
        runner = MigApply(replace(opts, config_name=journal.config_name), **kwargs)
        runner.journal = journal
        if "start_slurmd" in journal.steps_done():
            return runner.run(), True
        if not journal.error:
            step = next((s for s in STEPS if s not in journal.steps_done()), "resume")
            journal.error = f"{step}: the run stopped midway (mig apply --recover)"
        problems = runner.rollback()
        if problems:
            raise MigApplyFailed(f"{opts.node}: rollback incomplete: {'; '.join(problems)}")
        return journal, True


def preview(opts: ApplyOptions, **kwargs: Any) -> ApplyPreview:
    """`mig apply --dry-run`: the steps and diffs of a run; nothing touched, no lock needed."""
    return MigApply(opts, **kwargs).preview()


def emit(opts: ApplyOptions, directory: Path, **kwargs: Any) -> ApplyPreview:
    """`mig apply --emit DIR`: the new gres.conf (and slurm.conf), their diff and the steps
    into DIR for config management; nothing live touched (docs/mig.md, "Config management")."""
    from slurmgpu.util.emit import emit_files

    result = preview(opts, **kwargs)
    emit_files(directory, result.changes, result.steps)
    return result


def slurmd_check(gres_text: str, node_line: str) -> None:
    """Validate a gres.conf with Slurm's own parser (`slurmd -G`), as gen-gres --check does."""
    from slurmgpu.errors import ConfigCheckError
    from slurmgpu.sources.slurmd import check_gres_conf

    names = {w[5:] for ln in gres_text.splitlines() for w in ln.split() if w.startswith("Name=")}
    result = check_gres_conf(gres_text, node_line, gres_types=",".join(sorted(names)) or "gpu")
    if not result.ok:
        raise ConfigCheckError(
            "slurmd -G rejected the new gres.conf: " + " | ".join(result.errors[:3])
        )
