"""Stage metrics, energy: the kWh the window's GPU runs drew, their idle part, coverage, and
(with the policy's `[energy]` table) money and CO2. Whole-array numpy; no loop over runs.

Each run's `energy_kwh` (runs.py: a measure source's energy over Slurm's own, clipped to the
window like its GPU-hours) is summed where measured. **Idle energy** (docs/energy.md) is
estimated per run from its mean utilization `u` (the only time profile a run row has):

- a run whose mean utilization is at or below the idle rule's threshold (`[idle]`
  `util_pct`, 1 % by default) was idle by the rule all along: all its energy is idle;
- otherwise its GPUs are taken to have been busy a share `u` of the time and idle the rest,
  an idle GPU drawing `IDLE_POWER_RATIO` of a busy one's power: the idle share of its energy
  is (1 - u) r / ((1 - u) r + u);
- a run without a utilization adds nothing to `kwh_idle` (unknown is not idle).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from slurmgpu.accounting.columns import codes
from slurmgpu.accounting.document import Energy, EnergyCost, PartitionEnergy

# an idle GPU's power over a busy one's: roughly 70 W of an H100 SXM's 700 W, 55 W of an
# A100 SXM's 400 W (tests/doubles/pynvml/power.json records the figures and their sources)
IDLE_POWER_RATIO = 0.12


def idle_share(util_pct: np.ndarray, idle_util_pct: float) -> np.ndarray:
    """The idle part of each run's energy (0..1; 0 where the utilization is unknown)."""
    u = np.clip(util_pct / 100.0, 0.0, 1.0)
    idle_time = 1.0 - u
    denom = idle_time * IDLE_POWER_RATIO + u
    share = np.where(denom > 0, idle_time * IDLE_POWER_RATIO / np.where(denom > 0, denom, 1), 1.0)
    share = np.where(util_pct <= idle_util_pct, 1.0, share)
    return np.where(np.isnan(util_pct), 0.0, share)


def energy_of(frame: Any, work: Any, idle_util_pct: float = 1.0) -> Energy:
    """The document's `energy` block from the runs' working columns."""
    hours = work["gpu_hours"].to_numpy(dtype=float)
    gpu = hours > 0
    kwh = np.where(gpu, work["energy_kwh"].to_numpy(dtype=float), np.nan)
    known = ~np.isnan(kwh)
    util = work["util"].to_numpy(dtype=float)
    idle = np.where(known, np.nan_to_num(kwh) * idle_share(util, idle_util_pct), 0.0)
    measured = np.nan_to_num(kwh)
    total_hours = float(hours[gpu].sum())
    both = known & ~np.isnan(util)
    used = float((hours[both] * np.clip(util[both], 0, 100) / 100.0).sum())
    row_code, all_names = codes(frame, "partition")  # integer codes: no Python per row
    index = row_code[gpu]
    names = np.array(all_names, dtype=object)
    by_kwh = np.bincount(index, weights=measured[gpu], minlength=len(names))
    by_idle = np.bincount(index, weights=idle[gpu], minlength=len(names))
    order = sorted(range(len(names)), key=lambda i: (-by_kwh[i], names[i]))
    return Energy(
        kwh=float(measured.sum()),
        kwh_idle=float(idle.sum()),
        kwh_per_used_gpu_hour=float(measured[both].sum()) / used if used > 0 else None,
        coverage=float(hours[known].sum()) / total_hours if total_hours > 0 else 0.0,
        by_partition=tuple(
            PartitionEnergy(str(names[i]), float(by_kwh[i]), float(by_idle[i])) for i in order
        ),
    )


def cost_of(energy: Energy, policy: Any) -> EnergyCost | None:
    """Money and CO2 of the window's energy by the policy's `[energy]` table (None: none)."""
    if policy is None:
        return None
    return EnergyCost(
        pue=policy.pue,
        facility_kwh=policy.facility_kwh(energy.kwh),
        facility_kwh_idle=policy.facility_kwh(energy.kwh_idle),
        currency=policy.currency,
        price_per_kwh=policy.price_per_kwh,
        cost=policy.cost(energy.kwh),
        cost_idle=policy.cost(energy.kwh_idle),
        gco2_per_kwh=policy.gco2_per_kwh,
        co2_kg=policy.co2_kg(energy.kwh),
        co2_kg_idle=policy.co2_kg(energy.kwh_idle),
    )
