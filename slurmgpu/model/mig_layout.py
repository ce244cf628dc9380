"""Which GPU-instance sets fit one MIG GPU, and where each instance goes (pure).

NVIDIA's rule (MIG User Guide, "Supported MIG Profiles"): a GPU instance occupies
`memory_slices` consecutive slots of the GPU's memory-slice grid, starting at one of the
profile's placements, and uses `gpu_slices` of its compute slices. Instances may not overlap
on the grid, compute slices may not be over-used, each profile has a maximum count, and at
most one instance per GPU may carry the media extensions (`+me`: the GPU's one set of
JPEG/OFA engines). Everything here reads the catalogue's placement tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from slurmgpu.model.catalog import GpuModel, MigProfile, resolve


@dataclass(frozen=True, order=True)
class Placement:
    """One GPU instance: a profile at a start slot of the memory-slice grid."""

    start: int
    profile: MigProfile

    @property
    def slots(self) -> range:
        return range(self.start, self.start + self.profile.placement_size)


@dataclass(frozen=True)
class Layout:
    """A whole GPU's MIG layout: placed GPU instances (each with one full compute instance)."""

    model_key: str
    placements: tuple[Placement, ...]

    @property
    def counts(self) -> dict[str, int]:
        """{profile name: instances}, in placement order of first appearance."""
        return dict(Counter(p.profile.name for p in self.placements))

    @property
    def compute_slices_used(self) -> int:
        return sum(p.profile.gpu_slices for p in self.placements)

    @property
    def memory_slices_used(self) -> int:
        return sum(p.profile.memory_slices for p in self.placements)

    @property
    def label(self) -> str:
        """`3g.40gb + 2g.20gb + 1g.10gb x2` (biggest first), or `empty`."""
        return counts_label(p.profile.name for p in self.placements) or "empty"


def counts_label(profile_names: Iterable[str]) -> str:
    """Profile names as `3g.40gb + 1g.10gb x2`: biggest first, repeats counted."""
    counts = Counter(profile_names)
    items = sorted(counts.items(), key=lambda kv: (-int(kv[0].split("g.", 1)[0]), kv[0]))
    return " + ".join(n if c == 1 else f"{n} x{c}" for n, c in items)


def fits(model: GpuModel, placements: Iterable[Placement]) -> str | None:
    """Why these instances cannot coexist on one GPU of `model` (None: they can)."""
    used: dict[int, str] = {}
    compute = 0
    per_profile: Counter[str] = Counter()
    media = 0
    for pl in placements:
        p = pl.profile
        if model.profile(p.name) != p:
            return f"{p.name} is not a {model.key} profile"
        if pl.start not in p.placements:
            return f"{p.name} cannot start at slot {pl.start} (placements {list(p.placements)})"
        for slot in pl.slots:
            if slot in used:
                return f"{p.name}@{pl.start} overlaps {used[slot]} on memory slot {slot}"
            used[slot] = f"{p.name}@{pl.start}"
        compute += p.gpu_slices
        per_profile[p.name] += 1
        if per_profile[p.name] > p.max_instances:
            return f"more than {p.max_instances} x {p.name}"
        media += p.media_extensions
    if compute > model.compute_slices:
        return f"{compute} compute slices used, the GPU has {model.compute_slices}"
    if media > 1:
        return "more than one +me instance (one set of media engines per GPU)"
    return None


def place(model: GpuModel, counts: Mapping[str, int]) -> Layout | None:
    """Put `counts` ({profile: n}) on one GPU of `model`, or None when it cannot be done.

    Biggest instances first, each at its lowest free placement, backtracking when a later
    instance finds no room: the few profiles per GPU keep the search tiny.
    """
    wanted: list[MigProfile] = []
    for name, n in counts.items():
        profile = model.profile(name)
        if profile is None or n < 0:
            return None
        wanted += [profile] * n
    wanted.sort(key=lambda p: (-p.memory_slices, -p.gpu_slices, p.name))

    def search(i: int, chosen: tuple[Placement, ...]) -> tuple[Placement, ...] | None:
        if i == len(wanted):
            return chosen
        # identical instances go in increasing slots: one order per set, not n! of them
        after = chosen[-1].start if i and wanted[i] == wanted[i - 1] else -1
        for start in wanted[i].placements:
            if start <= after:
                continue
            candidate = (*chosen, Placement(start, wanted[i]))
            if fits(model, candidate) is None:
                found = search(i + 1, candidate)
                if found is not None:
                    return found
        return None

    found = search(0, ())
    if found is None:
        return None
    return Layout(model.key, tuple(sorted(found)))


@cache
def layouts(model_key: str, *, media_extensions: bool = False) -> tuple[Layout, ...]:
    """Every distinct valid layout of a model (by profile counts), most compute used first.

    `media_extensions=False` leaves out the `+me` profiles: they cost the same slices and only
    matter to jobs that decode video, which ask for them by name.
    """
    model = resolve(model_key)
    if model is None or not model.supports_mig:
        return ()
    profiles = [p for p in model.mig_profiles if media_extensions or not p.media_extensions]
    # every (profile, start) once, in a fixed order: a layout is grown only with candidates
    # after its last one, so each set of instances is visited once (no permutations)
    candidates = [Placement(start, p) for p in profiles for start in p.placements]
    found: dict[tuple[tuple[str, int], ...], Layout] = {}

    def grow(chosen: tuple[Placement, ...], first: int) -> None:
        if chosen:
            key = tuple(sorted(Counter(p.profile.name for p in chosen).items()))
            found.setdefault(key, Layout(model.key, tuple(sorted(chosen))))
        for i in range(first, len(candidates)):
            candidate = (*chosen, candidates[i])
            if fits(model, candidate) is None:
                grow(candidate, i + 1)

    grow((), 0)
    return tuple(sorted(found.values(), key=lambda lay: (-lay.compute_slices_used, lay.label)))


def maximal_layouts(model_key: str) -> tuple[Layout, ...]:
    """The layouts to which no further instance can be added (no slice left idle by choice)."""
    model = resolve(model_key)
    if model is None:
        return ()
    out = []
    for lay in layouts(model_key):
        grown = False
        for p in model.mig_profiles:
            if p.media_extensions:
                continue
            counts = dict(lay.counts)
            counts[p.name] = counts.get(p.name, 0) + 1
            if place(model, counts) is not None:
                grown = True
                break
        if not grown:
            out.append(lay)
    return tuple(out)
