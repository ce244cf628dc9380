"""`estimate_effects`: a recommendation's change replayed on the analysis' own runs."""

import json
from dataclasses import replace
from pathlib import Path

from slurmgpu.advice.effects import (
    Effect,
    EffectUnavailable,
    effect_key,
    estimate_effects,
)
from slurmgpu.replay import ReplayOptions, parse_change, replay_trace
from slurmgpu.replay.from_accounting import load_trace, trace_from_frame
from tests.unit.replay.test_what_if import history

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
OPTIONS = ReplayOptions(capacity={"train": 32, "infer": 32},
                        gpu_types={"train": "h100", "infer": "h100"})  # fmt: skip
MOVE = "move:infer:train:16"
CARVE = ["carve:infer:16:1g.10gb=7", "carve:infer:8:3g.40gb=2"]  # one carve, two layouts


def part(effect, name):
    return next(p for p in effect.by_partition if p.partition == name)


def test_a_move_shows_the_backlogs_p95_wait_falling_without_gpu_hours_lost():
    effects = estimate_effects(history(), OPTIONS, [MOVE])
    assert list(effects) == [MOVE]
    e = effects[MOVE]
    assert isinstance(e, Effect) and e.changes == (MOVE,)
    train, infer = part(e, "train"), part(e, "infer")
    assert (train.gpus.before, train.gpus.after) == (32, 48)
    assert (infer.gpus.before, infer.gpus.after) == (32, 16)
    assert train.wait_p95_s.after < train.wait_p95_s.before / 2
    assert train.wait_p95_s.difference < -3600
    assert infer.allocation_ratio.after > infer.allocation_ratio.before
    assert e.gpu_hours_lost.after == 0 and e.jobs_not_run.after == 0
    assert e.jobs == 600 and e.window_hours > 0


def test_the_numbers_are_the_replays_own():
    trace = history()
    report = replay_trace(trace, ReplayOptions(**{**OPTIONS.__dict__,
                                                  "what_if": (parse_change(MOVE),)}))  # fmt: skip
    e = estimate_effects(trace, OPTIONS, [MOVE])[MOVE]
    base, moved = report.baseline, report.scenarios[0]
    assert e.allocation_ratio.before == base.allocation_ratio
    assert e.allocation_ratio.after == moved.allocation_ratio
    assert e.wait_p95_s.before == base.wait_s.p95 and e.wait_p95_s.after == moved.wait_s.p95
    assert e.useful_gpu_hours.after == moved.useful_gpu_hours
    for p in moved.by_partition:
        assert part(e, p.partition).wait_p50_s.after == p.wait_s.p50
    tier = e.by_tier[0]
    assert (tier.tier, tier.wait_p95_s.after) == ("normal", moved.by_tier[0].wait_s.p95)


def test_several_changes_of_one_recommendation_apply_together():
    effects = estimate_effects(history(), OPTIONS, [CARVE, MOVE, MOVE])
    assert list(effects) == [effect_key(CARVE), MOVE]  # each once, in the order asked
    carved = effects["carve:infer:16:1g.10gb=7 + carve:infer:8:3g.40gb=2"]
    assert carved.changes == tuple(CARVE)
    assert carved.jobs_on_slices.before == 0 and carved.jobs_on_slices.after > 250
    assert part(carved, "infer").wait_p95_s.after <= 60
    # applied in turn, on the model the earlier ones left: after moving 24 of infer's 32
    # GPUs, a carve of 24 more no longer fits
    both = ["move:infer:train:24", "carve:infer:24:1g.10gb=7"]
    [late] = estimate_effects(history(), OPTIONS, [both]).values()
    assert isinstance(late, EffectUnavailable) and "infer has only 8 whole GPUs" in late.reason


def test_a_change_that_does_not_fit_is_unavailable_not_fatal():
    effects = estimate_effects(history(), OPTIONS, ["move:infer:train:999", MOVE, [], "bogus"])
    bad = effects["move:infer:train:999"]
    assert isinstance(bad, EffectUnavailable) and "sum of whole nodes" in bad.reason
    assert isinstance(effects["bogus"], EffectUnavailable)
    assert "use move:FROM:TO:GPUS" in effects["bogus"].reason
    assert isinstance(effects[MOVE], Effect)
    assert "" not in effects  # a recommendation without a change has no effect to replay
    assert bad.to_dict() == {"basis": "replay", "changes": ["move:infer:train:999"],
                             "unavailable": bad.reason}  # fmt: skip


def test_without_the_cluster_model_there_is_nothing_to_estimate():
    assert estimate_effects(history(), ReplayOptions(), [MOVE]) == {}
    assert estimate_effects(history(), OPTIONS, []) == {}


def test_from_the_accounting_frame_as_analyze_holds_it():
    from slurmgpu.accounting import load as load_mod
    from slurmgpu.accounting import runs

    files = [DATA / "synthetic-mix.txt"]
    frame = load_mod.load_files(files, options=load_mod.Options()).frame
    opts = ReplayOptions(capacity={"gpu": 16, "mig": 1}, gpu_types={"gpu": "h100", "mig": "h100"},
                         baseline_changes=(parse_change("carve:mig:1:1g.10gb=7"),))  # fmt: skip
    # as analyze() holds them: its frame and `runs.gpu_sizes(...).per_run_mib`
    sizes = runs.gpu_sizes(frame, dict(opts.gpu_types), {})
    got = estimate_effects(frame, opts, ["move:gpu:spare:8"], gpu_memory_mib=sizes.per_run_mib)
    got = got["move:gpu:spare:8"]
    assert isinstance(got, Effect)
    # the same as from the trace the replay command would load from the same dump
    want = estimate_effects(load_trace(files), opts, ["move:gpu:spare:8"])["move:gpu:spare:8"]
    # the fidelity's explanation reads the frame's users and accounts (a trace has none)
    assert replace(got, fidelity=()) == replace(want, fidelity=())
    assert [(f.partition, f.calibrated, f.note) for f in got.fidelity] == [
        (f.partition, f.calibrated, f.note) for f in want.fidelity
    ]
    assert len(trace_from_frame(frame)) == got.jobs > 0
    assert {p.partition: p.gpus.after for p in got.by_partition} == {
        "gpu": 8, "mig": 1, "spare": 8,
    }  # fmt: skip
    doc = got.to_dict()
    json.dumps(doc, allow_nan=False)  # JSON as the analysis document needs it
    assert doc["basis"] == "replay" and set(doc["wait_p95_s"]) == {"before", "after"}
    assert doc["by_partition"][0]["gpus"] == {"before": 16, "after": 8}


def test_processes_give_the_same_effects():
    one = estimate_effects(history(), OPTIONS, [MOVE, CARVE])
    two = estimate_effects(history(), ReplayOptions(**{**OPTIONS.__dict__, "processes": 2}),
                           [MOVE, CARVE])  # fmt: skip
    assert one == two


def test_analyze_fills_each_recommendation_with_the_same_replay():
    """analyze's `replayed` is what estimate_effects gives on analyze's own frame and capacity."""
    from slurmgpu.accounting import AnalysisOptions, runs
    from slurmgpu.advice import analyze
    from slurmgpu.advice.effects import analysis_replay_options

    result = analyze(AnalysisOptions(files=[DATA / "synthetic-mix.txt"],
                                     capacity={"gpu": 16, "mig": 1}))  # fmt: skip
    recs = result.document.recommendations
    wanted = [list(r.changes) for r in recs if r.changes]
    assert wanted == [["tier:p2:grace_s=300"]]  # the synthetic dump's one change
    options = analysis_replay_options({"gpu": 16, "mig": 1})
    sizes = runs.gpu_sizes(result.frame, {}, {})
    effects = estimate_effects(result.frame, options, wanted, gpu_memory_mib=sizes.per_run_mib)
    effect = effects[effect_key(wanted[0])]
    assert isinstance(effect, Effect) and effect.changes == ("tier:p2:grace_s=300",)
    assert effect.jobs == len(trace_from_frame(result.frame))
    assert [p.partition for p in effect.by_partition][:2] == ["gpu", "mig"]
    json.dumps(effect.to_dict(), allow_nan=False)
    replayed = next(r for r in recs if r.changes).replayed
    assert replayed is not None and replayed.to_json() == effect.to_dict()


def test_analysis_options_take_the_policys_qos():
    from slurmgpu.advice.effects import analysis_replay_options
    from slurmgpu.sources.policy_file import load_policy

    policy = load_policy(Path(__file__).resolve().parents[3] / "etc" / "slurmgpu.toml")
    opts = analysis_replay_options({"gpu": 16}, gpus_per_node={"gpu": 7.6}, tiers=policy)
    assert opts.gpus_per_node == {"gpu": 8}
    assert {q.name for q in opts.qos} == {t.qos for t in policy.tiers}
