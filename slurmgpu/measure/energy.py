"""One run's energy for `slurmgpu job`: the first measure source that has it (docs/energy.md).

`analyze` takes each run's measure from the first source that measured it at all; a single
job can afford to ask on: the collector's summary (AdminComment or spool), jobstats, then
Prometheus (the running job's energy so far).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slurmgpu.measure.options import MeasureOptions, build_measure_sources
from slurmgpu.model.measure import RunRef

JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class RunEnergy:
    kwh: float
    estimated: bool  # a MIG instance's or shared GPU's split, or integrated power
    source: str
    warnings: tuple[str, ...] = ()


def run_energy(
    run: RunRef, measure: MeasureOptions, now: datetime | None = None
) -> RunEnergy | None:
    """The run's energy from the first source that measured one; None when none did."""
    warnings: list[str] = []
    for source in build_measure_sources(measure):
        if now is not None and hasattr(source, "now"):
            source.now = now
        found = [m for m in source.measures([run]) if m.energy_j is not None]
        warnings += [str(w) for w in getattr(source, "warnings", ()) if w.kind == "energy"]
        if found:
            m = found[0]
            kwh = m.energy_j / JOULES_PER_KWH
            return RunEnergy(kwh, m.energy_estimated, source.name, tuple(warnings))
    return None
