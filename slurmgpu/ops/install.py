"""`slurmgpu install-units`: install the operations kit (etc/systemd, etc/slurm,
etc/logrotate.d) with `@SLURMGPU@` replaced by the installed executable.

The kit is data: each file lives once under the checkout's `etc/` (the wheel carries it as
`slurmgpu/etc/`), and `KIT` says where each goes. A unit's ExecStart must name the command
that pip actually installed (a venv's `bin/slurmgpu`, not /usr/local/bin), so the path is
found from the running interpreter, or given with `--bin`.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from slurmgpu.errors import SlurmgpuError, UsageError
from slurmgpu.util.atomic import read_existing, write_atomic

PLACEHOLDER = "@SLURMGPU@"
# ` --policy PATH` in the units of commands that read the policy only when given one (the
# reports: tier names rather than QOS); empty when install-units found no policy
POLICY_PLACEHOLDER = " @POLICY@"
# groups whose commands need the analysis extra (pandas, pyarrow, numpy): the light install
# (`pip install slurmgpu`) cannot run them
ANALYSIS_GROUPS = ("report", "store", "autopilot")
ANALYSIS_MODULES = ("pandas", "pyarrow", "numpy")


@dataclass(frozen=True)
class KitFile:
    """One file of the kit: its source under etc/, where it goes under the prefix, its mode,
    and the group it belongs to (`--only`)."""

    source: str
    target: str
    mode: int
    group: str


def _units(name: str, group: str) -> list[KitFile]:
    return [
        KitFile(f"systemd/{name}.{ext}", f"etc/systemd/system/{name}.{ext}", 0o644, group)
        for ext in ("service", "timer")
    ]


KIT: tuple[KitFile, ...] = (
    *_units("slurmgpu-collect", "collect"),
    *_units("slurmgpu-report", "report"),
    *_units("slurmgpu-report-prom", "report"),
    *_units("slurmgpu-rebalance", "rebalance"),
    *_units("slurmgpu-idle", "idle"),
    *_units("slurmgpu-ingest", "store"),
    *_units("slurmgpu-autopilot", "autopilot"),
    KitFile("slurm/slurmgpu-health", "usr/local/sbin/slurmgpu-health", 0o755, "health"),
    KitFile(
        "slurm/epilog.d/slurmgpu-collect.sh",
        "etc/slurm/epilog.d/slurmgpu-collect.sh",
        0o755,
        "collect",
    ),
    KitFile("logrotate.d/slurmgpu", "etc/logrotate.d/slurmgpu", 0o644, "logrotate"),
)
GROUPS = ("collect", "report", "rebalance", "idle", "store", "autopilot", "health", "logrotate")


@dataclass(frozen=True)
class Installed:
    """One kit file: where it went, whether it changed, and its text."""

    path: Path
    changed: bool
    text: str


def kit_dir() -> Path:
    """The installed `slurmgpu/etc` (wheel), else the checkout's `etc/`."""
    installed = resources.files("slurmgpu") / "etc"
    if installed.is_dir():
        return Path(str(installed))
    return Path(__file__).resolve().parents[2] / "etc"


def installed_executable() -> Path:
    """The `slurmgpu` command of this installation: beside the running interpreter (a venv's
    bin/), else the one on PATH, else the running script."""
    beside = Path(sys.executable).parent / "slurmgpu"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    on_path = shutil.which("slurmgpu")
    if on_path:
        return Path(on_path).absolute()
    argv0 = Path(sys.argv[0])
    if argv0.name == "slurmgpu" and argv0.is_file():
        return argv0.absolute()
    raise SlurmgpuError("cannot find the installed slurmgpu command: give --bin PATH")


def _check_bin(path: Path) -> Path:
    if not path.is_absolute():
        raise UsageError(f"--bin {path}: give an absolute path (systemd needs one)")
    if any(c.isspace() for c in str(path)) or "%" in str(path):
        raise UsageError(f"--bin {path}: a path with blanks or % cannot go into ExecStart")
    return path


def _check_prefix(prefix: str | os.PathLike[str]) -> Path:
    """`--prefix ''` would install into the current directory: refused."""
    if not str(prefix).strip():
        raise UsageError(
            f"--prefix {str(prefix)!r}: give a directory (/ for the live system, or a staging tree)"
        )
    return Path(prefix)


def analysis_installed() -> bool:
    """Whether this installation has the analysis extra (the light install has not)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ANALYSIS_MODULES)


def chosen_groups(only: tuple[str, ...], analysis: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the groups to install, those left out because the install cannot run them). A group
    asked for by name that needs the missing extra is refused."""
    unknown = sorted(set(only) - set(GROUPS))
    if unknown:
        raise UsageError(f"--only {', '.join(unknown)}: choose from {', '.join(GROUPS)}")
    wanted = tuple(g for g in GROUPS if not only or g in only)
    if analysis:
        return wanted, ()
    asked = [g for g in only if g in ANALYSIS_GROUPS]
    if asked:
        raise UsageError(
            f"--only {', '.join(asked)}: needs the analysis extra, which this installation "
            "lacks: pip install 'slurmgpu[analysis]'"
        )
    return (
        tuple(g for g in wanted if g not in ANALYSIS_GROUPS),
        tuple(g for g in wanted if g in ANALYSIS_GROUPS),
    )


def render_kit_file(item: KitFile, executable: Path, policy: str | None = None) -> str:
    """The kit file with the command (and, where it takes one, ` --policy PATH`) filled in."""
    text = (kit_dir() / item.source).read_text(encoding="utf-8")
    runs_command = not item.source.endswith(".timer") and item.group != "logrotate"
    if runs_command and PLACEHOLDER not in text:
        raise SlurmgpuError(f"kit file {item.source} names no {PLACEHOLDER}")
    policy_arg = f" --policy {policy}" if policy else ""
    return text.replace(PLACEHOLDER, str(executable)).replace(POLICY_PLACEHOLDER, policy_arg)


def install_units(
    prefix: str | os.PathLike[str] = "/",
    *,
    executable: str | os.PathLike[str] | None = None,
    only: tuple[str, ...] = (),
    dry_run: bool = False,
    policy: str | None = None,
    analysis: bool | None = None,
) -> list[Installed]:
    """Install the kit under `prefix` (`/` for the live system, a directory to stage it for
    a package or config management), with `@SLURMGPU@` set to `executable` (default: this
    installation's command) and the report units given `--policy policy` when set. `only`
    picks groups (GROUPS); without the analysis extra (`analysis`, default: detected) the
    groups that need it are left out. `dry_run` writes nothing and returns what would be
    written. Files whose text is already there are left alone."""
    root = _check_prefix(prefix)
    groups, _ = chosen_groups(only, analysis_installed() if analysis is None else analysis)
    exe = _check_bin(Path(executable) if executable else installed_executable())
    chosen = [item for item in KIT if item.group in groups]
    rendered = [(item, render_kit_file(item, exe, policy)) for item in chosen]  # all first
    done = []
    for item, text in rendered:
        target = root / item.target
        changed = read_existing(target) != text
        if changed and not dry_run:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SlurmgpuError(f"{target.parent}: cannot create: {exc.strerror}") from exc
            write_atomic(target, text, mode=item.mode, backup=False)
            target.chmod(item.mode)
        done.append(Installed(target, changed, text))
    return done


# its ExecStart names an example Prometheus URL and SMTP host: enabled after they are set
IDLE_TIMER = "slurmgpu-idle.timer"


@dataclass(frozen=True)
class TurnedOn:
    """What the site policy turns on, for the timers `next_steps` suggests: `policy` is None
    when install-units found none (then no acting timer is suggested)."""

    policy: str | None = None
    idle: bool = False  # an [idle] table
    autopilot: bool = False  # an [autopilot] table
    rebalance: bool = False  # asked for by name (--only rebalance), and no [autopilot]


def turned_on(policy_path: str | None, policy, only: tuple[str, ...]) -> TurnedOn:
    """The acting timers `policy` (a loaded Policy, or None) turns on."""
    if policy is None:
        return TurnedOn()
    autopilot = policy.autopilot is not None
    return TurnedOn(
        policy=policy_path,
        idle=policy.idle is not None,
        autopilot=autopilot,
        rebalance="rebalance" in only and not autopilot,
    )


def timer_verdicts(timers: list[str], on: TurnedOn) -> tuple[list[str], list[str]]:
    """(the timers to enable, one note per installed timer left off and why). The acting
    timers (idle, autopilot, rebalance) run only where the policy turns them on; rebalance
    and autopilot both move nodes, so never both."""
    why_not = {
        "slurmgpu-idle.timer": None if on.idle else "the policy has no [idle] table",
        "slurmgpu-autopilot.timer": None if on.autopilot else "the policy has no [autopilot] table",
        "slurmgpu-rebalance.timer": None
        if on.rebalance
        else (
            "the autopilot moves nodes (the two would fight)"
            if on.autopilot
            else "it moves nodes unattended: ask for it by name (--only rebalance)"
        ),
    }
    if on.policy is None:
        why_not = {name: "no site policy (--policy)" for name in why_not}
    enable, notes = [], []
    for timer in timers:
        reason = why_not.get(timer)
        if reason is None and timer != IDLE_TIMER:
            enable.append(timer)
        elif reason is not None:
            notes.append(f"{timer} is installed, not enabled: {reason}")
    return enable, notes


def next_steps(installed: list[Installed], on: TurnedOn | None = None) -> list[str]:
    """What the admin runs after the install (systemd reload, the timers to enable: only the
    acting ones the policy turns on, slurm.conf)."""
    steps = []
    all_timers = [i.path.name for i in installed if i.path.suffix == ".timer"]
    timers, _ = timer_verdicts(all_timers, on or TurnedOn())
    if all_timers:
        steps.append("systemctl daemon-reload")
        node = [t for t in timers if t.startswith("slurmgpu-collect")]
        ctl = [t for t in timers if t not in node]
        if node:
            steps.append(f"on GPU nodes: systemctl enable --now {' '.join(node)}")
        if ctl:
            steps.append(f"on the controller: systemctl enable --now {' '.join(ctl)}")
        if IDLE_TIMER in all_timers and (on or TurnedOn()).idle and (on or TurnedOn()).policy:
            steps.append(
                "on the controller: set the Prometheus URL and SMTP host in "
                f"slurmgpu-idle.service, then systemctl enable --now {IDLE_TIMER}"
            )
    for i in installed:
        if i.path.name == "slurmgpu-health":
            steps.append(f"slurm.conf: HealthCheckProgram={_live_path(i.path)}")
        if i.path.name == "slurmgpu-collect.sh":
            steps.append(f"slurm.conf: Epilog={_live_path(i.path)}")
    return steps


def _live_path(path: Path) -> str:
    """The path as it will be on the node (a staged prefix stripped when it is a kit target)."""
    text = str(path)
    for item in KIT:
        if text.endswith("/" + item.target):
            return "/" + item.target
    return text
