"""Energy meters of the collector: each GPU's cumulative energy, kept across passes.

A device gives either a cumulative energy counter (NVML's total energy consumption, mJ since
the driver was loaded, Volta and later; amdsmi's energy accumulator) or only its power now
(NVML's power usage, older GPUs). One `Meter` per whole device turns its readings into a
running total in joules that never goes down:

- **counter**: the total grows by the counter's increase between passes. A counter that went
  down was either wrapped (it was near the top of its width: the increase runs through the
  top) or reset (a driver reload restarts NVML's counter at 0): after a reset only the new
  value -- the energy since the reload, which lies inside the interval -- is added, the energy
  of the interval before the reload is missing and the reset is counted (`resets`), so the
  job's summary says so. Energy is never negative and never made up.
- **power**: the total grows by the trapezoid of the two power readings over the interval
  when the interval is at most `MAX_POWER_GAP_S`; a longer gap adds nothing and is counted
  (`gaps`): power between two samples far apart is not known.

Missing passes cost a counter nothing (it is cumulative); the first pass of a meter only
starts it. MIG instances have no counter: their GPU's interval energy is split among them by
compute slices (`mig_share`), an estimate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_POWER_GAP_S = 300.0  # power samples further apart than this are not integrated
MIG_COMPUTE_SLICES = 7  # compute slices of an A100/H100/H200/B200 GPU in MIG mode
# a counter that went down from above this share of its range wrapped (else it was reset)
WRAP_ZONE = 0.5


@dataclass(frozen=True)
class EnergyReading:
    """One whole device's energy figures in one pass (None: the device does not give it)."""

    counter_j: float | None  # cumulative counter, joules
    power_w: float | None  # power now, watts
    counter_max_j: float = float(2**64) / 1000.0  # the counter's range (NVML: u64 mJ)


@dataclass
class Meter:
    """A device's running total (joules) and what was wrong on the way."""

    total_j: float = 0.0
    t: float | None = None  # time of the last reading
    counter_j: float | None = None  # the last counter value
    power_w: float | None = None  # the last power value
    source: str = ""  # "counter" or "power": what the total was last built from
    resets: int = 0  # counter went down (driver reload): energy before it missing
    wraps: int = 0  # counter passed the top of its range (increase still counted)
    gaps: int = 0  # power samples too far apart: the gap's energy missing

    def advance(self, now: float, reading: EnergyReading) -> float:
        """Add one reading; the energy added (joules, >= 0)."""
        added = 0.0
        if reading.counter_j is not None and reading.counter_j >= 0:
            if self.counter_j is not None and self.t is not None and self.source == "counter":
                added, event = counter_increase(
                    self.counter_j, reading.counter_j, reading.counter_max_j
                )
                if event == "reset":
                    self.resets += 1
                elif event == "wrap":
                    self.wraps += 1
            self.counter_j, self.source = reading.counter_j, "counter"
        elif reading.power_w is not None and reading.power_w >= 0:
            if self.power_w is not None and self.t is not None and self.source == "power":
                dt = now - self.t
                if 0 < dt <= MAX_POWER_GAP_S:
                    added = (self.power_w + reading.power_w) / 2.0 * dt
                elif dt > MAX_POWER_GAP_S:
                    self.gaps += 1
            self.power_w, self.source = reading.power_w, "power"
        else:
            return 0.0  # nothing read this pass: the next counter reading covers it
        self.total_j += added
        self.t = now
        return added


def counter_increase(last: float, new: float, top: float) -> tuple[float, str | None]:
    """The increase of a cumulative counter from `last` to `new` (range `top`) and what
    happened: None, "wrap" (it passed the top) or "reset" (it restarted: only `new` counts)."""
    if new >= last:
        return new - last, None
    if last >= WRAP_ZONE * top and new < (1 - WRAP_ZONE) * top:
        return (top - last) + new, "wrap"
    return new, "reset"


def compute_slices(profile: str | None) -> int | None:
    """Compute slices of a MIG profile (`3g.40gb` -> 3, `1g.10gb+me` -> 1); None unknown."""
    found = re.match(r"(\d+)g\.", profile or "")
    return int(found.group(1)) if found else None


def mig_share(profile: str | None) -> float | None:
    """The share of its GPU's energy a MIG instance is charged: its compute slices over the
    GPU's 7 (the rule of docs/energy.md); None when the profile does not say."""
    slices = compute_slices(profile)
    if slices is None:
        return None
    return min(slices, MIG_COMPUTE_SLICES) / MIG_COMPUTE_SLICES
