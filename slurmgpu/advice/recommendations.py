"""The analysis' recommendations with their replayed effects (`analyze` = the accounting
analysis, then `replay_effects`)."""

from __future__ import annotations

from dataclasses import replace

from slurmgpu.accounting.document import AnalysisResult
from slurmgpu.accounting.options import AnalysisOptions

# `replay_effects="auto"` replays recommendations only up to this many runs in the window
# (a replay of a million runs takes minutes; `slurmgpu replay` is the tool for those)
REPLAY_EFFECTS_AUTO_RUNS = 100_000


def analyze(options: AnalysisOptions) -> AnalysisResult:
    """`accounting.analyze(options)` with each recommendation's change(s) replayed on the
    window's runs (`options.replay_effects`: auto, always, never)."""
    from slurmgpu.accounting import analyze as analyze_accounting

    return replay_effects(analyze_accounting(options), options.replay_effects, options.tiers)


def replay_effects(result: AnalysisResult, when: str = "auto", tiers=None) -> AnalysisResult:
    """The result with its recommendations' `replayed` effects filled in, when the cluster
    model is known; else with a note saying why they were not replayed (`when`: auto, always
    or never; `tiers`: the site policy, for the replay's QOS)."""
    doc = result.document
    wanted = [r.changes for r in doc.recommendations if r.changes]
    facts = result.cluster
    if not wanted or when == "never" or facts is None:
        return result
    note = _not_replayed(result, when)
    if note:
        return replace(result, document=replace(doc, notes=(*doc.notes, note)))
    from slurmgpu.advice.effects import (
        analysis_replay_options,
        effect_key,
        estimate_effects,
        replayed_effect,
    )

    options = analysis_replay_options(
        facts.capacity, gpus_per_node=facts.gpus_per_node, gpu_types=facts.gpu_types, tiers=tiers
    )
    effects = estimate_effects(
        result.frame, options, wanted, gpu_memory_mib=facts.gpu_memory_mib,
        top_tier=_top_tier(tiers),
    )  # fmt: skip
    recommendations = []
    off: list[str] = []  # partitions the replay does not reproduce, under a recommendation
    unfaithful = 0
    for rec in doc.recommendations:
        effect = effects.get(effect_key(list(rec.changes))) if rec.changes else None
        if effect is not None:
            rec = replace(rec, replayed=replayed_effect(effect))
            bad = [f.partition for f in getattr(effect, "fidelity", ()) if not f.calibrated]
            unfaithful += bool(bad)
            off += [p for p in bad if p not in off]
        recommendations.append(rec)
    harmful = sum(1 for r in recommendations if r.replayed is not None and r.replayed.harm)
    notes = doc.notes
    if unfaithful:
        notes = (*notes, f"{unfaithful} of {len(wanted)} recommendations are not advised: they "
                 f"touch a partition whose baseline replay is off by more than the policy's "
                 f"tolerance ({', '.join(off)}): the replay cannot judge them; `slurmgpu replay "
                 "--calibrate` says why it misses")  # fmt: skip
    if harmful:
        notes = (*notes, f"{harmful} of {len(wanted)} recommendations are not advised: their "
                 "replay breaks the site's objective (replay shows harm); `slurmgpu advise` "
                 "searches for changes its replay accepts")  # fmt: skip
    return replace(
        result, document=replace(doc, recommendations=tuple(recommendations), notes=notes)
    )


def _top_tier(tiers) -> str | None:
    """The policy's highest-priority tier (its objective's `p0_max_wait_s` applies to it)."""
    if not getattr(tiers, "tiers", None):
        return None
    return max(tiers.tiers, key=lambda t: t.priority).name


def _not_replayed(result: AnalysisResult, when: str) -> str | None:
    """Why the recommendations cannot be replayed (None: they can)."""
    facts = result.cluster
    assert facts is not None
    if len(facts.clusters) > 1:
        return (
            "recommendations were not replayed: the window holds several clusters and the "
            "replay models one (run `slurmgpu replay --what-if CHANGE` on one cluster's dump)"
        )
    if not facts.capacity:
        return (
            "recommendations were not replayed: the cluster's capacity is unknown (give "
            "capacity PARTITION=GPUS, or analyze the live cluster)"
        )
    runs = len(result.frame)
    if when == "auto" and runs > REPLAY_EFFECTS_AUTO_RUNS:
        return (
            f"recommendations were not replayed: {runs:,} runs in the window is more than "
            f"{REPLAY_EFFECTS_AUTO_RUNS:,} (ask for replay effects always, or run `slurmgpu "
            "replay --what-if CHANGE` on the dump)"
        )
    return None
