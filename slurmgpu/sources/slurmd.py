"""Validate a gres.conf with Slurm's own parser: `slurmd -G` under a private SLURM_CONF.

The private slurm.conf carries `SlurmdParameters=config_overrides`, so `Cores=` are checked
against the node line's declared layout (a DGX's 256 CPUs) rather than the machine running
the check. `slurmd -G` exits 0 even when it prints `error:` lines, so every `error:` or
`fatal:` line counts as a failure, whatever the exit code.

Off-node, the GPU device files named by File=/MultipleFiles= do not exist; slurmd insists on
character devices, so they are mapped to stand-in character devices in the temp dir (mknod,
as root) and the result says so; without root each becomes its own symlink to /dev/null
(distinct names: slurmd refuses one file named twice) and the result says that device
existence was not checked. Records are compared with what was generated (`expected`), with
the stand-in paths mapped back to the real ones.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from slurmgpu.errors import SlurmCommandError
from slurmgpu.model.gres_record import GresDevice, compare_gres_records
from slurmgpu.util.hostlist import expand_hostlist, parse_id_list
from slurmgpu.util.proc import run

_FILE_KEYS = re.compile(r"\b(File|MultipleFiles)=(\S+)", re.IGNORECASE)
_NODE_NAME = re.compile(r"\bNodeName=(\S+)")
_VERSION = re.compile(r"slurm(?:-wlm)?\s+(\d+)\.(\d+)")
# Newer slurmd does more than parse under `slurmd -G` (seen with 24.11.5; 22.05.8 does
# neither): it initialises a cgroup plugin, stopping with "Unable to initialize cgroup plugin"
# where no cgroup filesystem is mounted, and it creates a MUNGE credential, failing with "Munge
# encode failed ... Did you start munged?" where munged is not running (off-node generation).
# A syntax check needs neither: `CgroupPlugin=disabled` (24.05+; 22.05 refuses the value) and
# `AuthType=auth/none` + `CredType=cred/none` in the private configuration.
CGROUP_DISABLED_FROM = (24, 5)
_NO_AUTH = ("AuthType=auth/none", "CredType=cred/none")
# slurmd noise that says nothing about gres.conf (seen with Debian's 22.05 packages)
_HARMLESS = (re.compile(r"mpi/pmix"),)


@dataclass
class GresCheck:
    """What `slurmd -G` made of a gres.conf.

    `records` are slurmd's record lines as printed; `parsed` the same as `GresDevice`s with
    the stand-in device paths mapped back to the real ones; `differences` what differs from
    the records the caller expected (when it passed them); any difference makes `ok` False.
    """

    ok: bool
    records: list[str]
    errors: list[str]
    output: str
    notes: list[str] = field(default_factory=list)
    parsed: list[GresDevice] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)


_RECORD_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_record(line: str, real_path: dict[str, str] | None = None) -> GresDevice:
    """One `slurmd -G` record (`Name=gpu Type=a100 Count=1 ... File=... Cores=0-55 Links=...`).

    slurmd prints `(null)` where a record has no Links; File lists the device files it opened
    comma-separated, which `real_path` maps back from stand-ins to the generated paths.
    """
    values = dict(_RECORD_FIELD.findall(line))
    mapping = real_path or {}
    files = tuple(mapping.get(f, f) for f in values.get("File", "").split(",") if f)
    cores_text = values.get("Cores", "")
    try:
        cores = tuple(parse_id_list(cores_text)) if cores_text not in ("", "(null)") else ()
        count = int(values.get("Count", "0"))
    except ValueError as exc:
        raise SlurmCommandError(
            f"slurmd -G printed a record slurmgpu cannot read: {line!r}"
        ) from exc
    links = values.get("Links")
    return GresDevice(
        name=values.get("Name", ""),
        type=values.get("Type") if values.get("Type") not in (None, "(null)") else None,
        count=count,
        files=files,
        cores=cores,
        links=links if links not in (None, "", "(null)") else None,
    )


def _is_device(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _device_paths(gres_text: str) -> list[str]:
    paths: list[str] = []
    for line in gres_text.splitlines():
        line = line.split("#", 1)[0]
        for _key, value in _FILE_KEYS.findall(line):
            for item in expand_hostlist(value):
                if item not in paths:
                    paths.append(item)
    return paths


def _major(path: str) -> int:
    """A plausible char major for a stand-in: NVIDIA 195, DRM 226, else a local-use 240."""
    if path.startswith("/dev/nvidia"):
        return 195
    if path.startswith("/dev/dri/"):
        return 226
    return 240


def _stand_ins(gres_text: str, dev_dir: Path) -> tuple[str, list[str], dict[str, str]]:
    """Rewrite missing device paths to stand-in char devices; return text, notes, mapping."""
    missing = [p for p in _device_paths(gres_text) if not _is_device(p)]
    if not missing:
        return gres_text, [], {}
    mapping: dict[str, str] = {}
    can_mknod = hasattr(os, "geteuid") and os.geteuid() == 0
    for i, path in enumerate(missing):
        stand_in = dev_dir / path.strip("/").replace("/", "_")
        if can_mknod:
            os.mknod(stand_in, 0o600 | stat.S_IFCHR, os.makedev(_major(path), i % 256))
        else:
            # a symlink per device: slurmd follows it to a character device, and the names
            # stay distinct (one /dev/null for all fails as a "duplicate device file name")
            os.symlink("/dev/null", stand_in)
        mapping[path] = str(stand_in)

    def expand_and_map(match: re.Match[str]) -> str:
        items = [mapping.get(p, p) for p in expand_hostlist(match.group(2))]
        return f"{match.group(1)}={','.join(items)}"

    lines = []
    for line in gres_text.splitlines():
        code, sep, comment = line.partition("#")
        lines.append(_FILE_KEYS.sub(expand_and_map, code) + sep + comment)
    if can_mknod:
        note = (
            f"{len(missing)} device file(s) do not exist on this host "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): "
            "checked against stand-in character devices"
        )
    else:
        note = (
            f"{len(missing)} device file(s) do not exist on this host; without root the "
            "stand-ins are links to /dev/null: device existence could not be checked"
        )
    return "\n".join(lines) + "\n", [note], mapping


def _slurmd_series(slurmd: str) -> tuple[int, int] | None:
    """(24, 11) from `slurmd -V` (no slurm.conf needed); None when it does not say."""
    proc = run([slurmd, "-V"], timeout=30, check=False)
    m = _VERSION.search((proc.stdout or "") + (proc.stderr or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_gres_conf(
    gres_text: str,
    node_line: str,
    *,
    gres_types: str = "gpu",
    slurmd: str = "slurmd",
    timeout: float = 60.0,
    expected: list[GresDevice] | None = None,
) -> GresCheck:
    """Run `slurmd -G -N NODE` on `gres_text` with `node_line` as the only node.

    With `expected` (what the generator meant), slurmd's records are compared with it record
    by record (count, type, files, cores, links), and any difference fails the check.
    """
    m = _NODE_NAME.search(node_line)
    if not m:
        raise SlurmCommandError(f"node line has no NodeName=: {node_line!r}")
    try:
        node = expand_hostlist(m.group(1))[0]  # NodeName=dgx[01-10]: check as dgx01
    except (ValueError, IndexError) as exc:
        raise SlurmCommandError(f"node line has a malformed NodeName=: {m.group(1)!r}") from exc
    if shutil.which(slurmd) is None:
        raise SlurmCommandError(f"{slurmd}: command not found (cannot check with slurmd -G)")
    series = _slurmd_series(slurmd)
    newer = series is not None and series >= CGROUP_DISABLED_FROM
    with tempfile.TemporaryDirectory(prefix="slurmgpu-check-") as tmp:
        root = Path(tmp)
        (root / "dev").mkdir()
        (root / "spool").mkdir()
        text, notes, mapping = _stand_ins(gres_text, root / "dev")
        (root / "gres.conf").write_text(text, encoding="utf-8")
        (root / "slurm.conf").write_text(
            "\n".join(
                [
                    "ClusterName=slurmgpucheck",
                    "SlurmctldHost=localhost",
                    "SlurmdParameters=config_overrides",
                    f"GresTypes={gres_types}",
                    f"SlurmdSpoolDir={root / 'spool'}",
                    f"StateSaveLocation={root / 'spool'}",
                    f"SlurmdPidFile={root / 'slurmd.pid'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    *(_NO_AUTH if newer else ()),
                    node_line,
                    f"PartitionName=check Nodes={m.group(1)} Default=YES",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        if newer:
            (root / "cgroup.conf").write_text("CgroupPlugin=disabled\n", encoding="utf-8")
        proc = run(
            [slurmd, "-G", "-N", node],
            env={"SLURM_CONF": str(root / "slurm.conf")},
            timeout=timeout,
            check=False,
        )
    output = (proc.stdout or "") + (proc.stderr or "")
    real_path = {stand_in: path for path, stand_in in mapping.items()}
    records, errors, parsed = [], [], []
    for line in output.splitlines():
        if "Gres Name=" in line:
            record = line.split("Gres ", 1)[1].strip()
            records.append(record)
            parsed.append(parse_record(record, real_path))
        elif re.search(r"\b(error|fatal):", line) and not any(h.search(line) for h in _HARMLESS):
            errors.append(line.strip())
    if proc.returncode != 0 and not errors:
        errors.append(f"slurmd -G exited {proc.returncode}")
    differences = []
    if expected is not None:
        differences = compare_gres_records(expected, parsed)
    return GresCheck(
        ok=not errors and not differences,
        records=records,
        errors=errors,
        output=output,
        notes=notes,
        parsed=parsed,
        differences=differences,
    )
