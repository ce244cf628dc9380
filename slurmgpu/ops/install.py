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


def render_kit_file(item: KitFile, executable: Path) -> str:
    text = (kit_dir() / item.source).read_text(encoding="utf-8")
    runs_command = not item.source.endswith(".timer") and item.group != "logrotate"
    if runs_command and PLACEHOLDER not in text:
        raise SlurmgpuError(f"kit file {item.source} names no {PLACEHOLDER}")
    return text.replace(PLACEHOLDER, str(executable))


def install_units(
    prefix: str | os.PathLike[str] = "/",
    *,
    executable: str | os.PathLike[str] | None = None,
    only: tuple[str, ...] = (),
    dry_run: bool = False,
) -> list[Installed]:
    """Install the kit under `prefix` (`/` for the live system, a directory to stage it for
    a package or config management), with `@SLURMGPU@` set to `executable` (default: this
    installation's command). `only` picks groups (GROUPS); `dry_run` writes nothing and
    returns what would be written. Files whose text is already there are left alone."""
    unknown = sorted(set(only) - set(GROUPS))
    if unknown:
        raise UsageError(f"--only {', '.join(unknown)}: choose from {', '.join(GROUPS)}")
    exe = _check_bin(Path(executable) if executable else installed_executable())
    root = Path(prefix)
    chosen = [item for item in KIT if not only or item.group in only]
    rendered = [(item, render_kit_file(item, exe)) for item in chosen]  # all, before writing
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


def next_steps(installed: list[Installed]) -> list[str]:
    """What the admin runs after the install (systemd reload, timers to enable, slurm.conf)."""
    steps = []
    timers = [i.path.name for i in installed if i.path.suffix == ".timer"]
    if timers:
        steps.append("systemctl daemon-reload")
        node = [t for t in timers if t.startswith("slurmgpu-collect")]
        ctl = [t for t in timers if t not in node and not t.startswith("slurmgpu-idle")]
        if node:
            steps.append(f"on GPU nodes: systemctl enable --now {' '.join(node)}")
        if ctl:
            steps.append(f"on the controller: systemctl enable --now {' '.join(ctl)}")
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
