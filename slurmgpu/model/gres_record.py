"""One GRES record as Slurm holds it after parsing gres.conf, and how two lists of them differ.

`slurmd -G` prints each record it parsed (`Gres Name=gpu Type=a100 Count=1 ... File=...
Cores=0-55 ... Links=-1,12`). gen-gres states the records it meant to write in the same
shape, so `gen-gres --check` compares them field by field: a record slurmd dropped, merged,
split or read differently (a `#` cutting a line, a type Slurm shortened) fails the check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from slurmgpu.util.hostlist import format_id_list


@dataclass(frozen=True)
class GresDevice:
    """A gres.conf record. In an expected record `type`/`cores` None mean 'not compared':
    Slurm fills in a shard's type and cores from the GPU on the same device file."""

    name: str
    type: str | None
    count: int
    files: tuple[str, ...]
    cores: tuple[int, ...] | None
    links: str | None

    @property
    def label(self) -> str:
        where = ",".join(self.files) if self.files else "(no File)"
        return f"{self.name} {where}"


def per_device(records: Iterable[GresDevice]) -> list[GresDevice]:
    """Records split to one per device: `File=/dev/nvidia[0-3]` (Count=4, four files) becomes
    four Count=1 records. slurmd itself splits them once `shard` is in GresTypes, so the
    comparison is made at this level. A MIG record (Count=1, several files) stays whole."""
    out = []
    for rec in records:
        if rec.count > 1 and rec.count == len(rec.files):
            out.extend(replace(rec, count=1, files=(f,)) for f in rec.files)
        else:
            out.append(rec)
    return out


def _fields(rec: GresDevice) -> dict[str, str]:
    return {
        "Type": rec.type or "(none)",
        "Count": str(rec.count),
        "Cores": "(not compared)" if rec.cores is None else format_id_list(rec.cores) or "(none)",
        "Links": rec.links or "(none)",
    }


def compare_gres_records(expected: Iterable[GresDevice], parsed: Iterable[GresDevice]) -> list[str]:
    """Every difference between what was generated and what slurmd parsed (empty: same).

    Records are matched by (name, device files), after splitting to one per device.
    """
    want, got = per_device(expected), per_device(parsed)
    diffs: list[str] = []

    def keyed(records: list[GresDevice]) -> dict[tuple[str, tuple[str, ...]], GresDevice]:
        out: dict[tuple[str, tuple[str, ...]], GresDevice] = {}
        for rec in records:
            k = (rec.name, rec.files)
            if k in out:
                diffs.append(f"{rec.label}: listed twice")
            out[k] = rec
        return out

    want_by, got_by = keyed(want), keyed(got)
    for k, rec in want_by.items():
        other = got_by.get(k)
        if other is None:
            diffs.append(f"{rec.label}: generated, but slurmd -G did not report it")
            continue
        mine, theirs = _fields(rec), _fields(other)
        for field, value in mine.items():
            if (field == "Type" and rec.type is None) or (field == "Cores" and rec.cores is None):
                continue
            if value != theirs[field]:
                diffs.append(
                    f"{rec.label}: {field} generated {value}, slurmd -G parsed {theirs[field]}"
                )
    for k, rec in got_by.items():
        if k not in want_by:
            diffs.append(f"{rec.label}: reported by slurmd -G, but not generated")
    for name in sorted({r.name for r in want} | {r.name for r in got}):
        total_want = sum(r.count for r in want if r.name == name)
        total_got = sum(r.count for r in got if r.name == name)
        if total_want != total_got:
            diffs.append(f"{name}: {total_want} generated in all, slurmd -G counted {total_got}")
    return diffs
