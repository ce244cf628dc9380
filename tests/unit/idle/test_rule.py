"""The idle rule against its literal definition (tests/idle_reference.py)."""

from __future__ import annotations

import pytest

from slurmgpu.idle.rule import evaluate
from slurmgpu.model.measure import DeviceSeries
from slurmgpu.model.policy import IdleRule
from tests.idle_reference import Dev, generate, reference_flag

START = 1_764_547_200.0


def series(devs: list[Dev]) -> list[DeviceSeries]:
    return [DeviceSeries(d.key, d.node, d.gpu, tuple(d.times), tuple(d.util)) for d in devs]


def verdict(devs, rule, *, end, gap=300.0, gpus=None):
    return evaluate(
        series(devs),
        start=START,
        end=end,
        rule=rule,
        max_gap_s=gap,
        gpus_held=len(devs) if gpus is None else gpus,
    )


@pytest.mark.parametrize("seed", range(60))
def test_agrees_with_the_literal_rule(seed):
    kind, devs = generate(seed, START, hours=5, gpus=1 + seed % 4)
    rule = IdleRule(window_min=60 + 30 * (seed % 3), util_pct=1.0, warn_after_min=(20, 45))
    end = START + 5 * 3600
    expected = reference_flag(devs, START, end, rule.window_s, rule.util_pct, 300.0)
    assert verdict(devs, rule, end=end).flagged_at == expected, kind


def test_idle_from_start_flags_at_the_window_and_warns_before():
    devs = [Dev("n/0", "n", "0", [START + 30 * i for i in range(400)], [0.0] * 400)]
    rule = IdleRule(window_min=120, util_pct=1, warn_after_min=(60, 105))
    v = verdict(devs, rule, end=START + 400 * 30)
    assert v.flagged_at == START + 7200
    assert v.warnings == (START + 3600, START + 105 * 60)


def test_one_busy_sample_pushes_the_flag_a_window_later():
    times = [START + 30 * i for i in range(600)]
    util = [0.0] * 600
    util[100] = 5.0  # at START + 3000
    devs = [Dev("n/0", "n", "0", times, util)]
    v = verdict(devs, IdleRule(window_min=60, warn_after_min=()), end=times[-1])
    assert v.flagged_at == START + 3000 + 3600 + 30  # the first sample after busy + window


def test_a_gap_is_not_idleness():
    times = [START + 30 * i for i in range(100)] + [START + 30 * i for i in range(120, 400)]
    devs = [Dev("n/0", "n", "0", times, [0.0] * len(times))]
    v = verdict(devs, IdleRule(window_min=60, warn_after_min=()), end=times[-1])
    # the 630 s hole (2970 .. 3600): a window may start at most max_gap (300 s) before the
    # first sample after it, so the first window is [3300, 6900]
    assert v.flagged_at == START + 3600 - 300 + 3600


def test_a_gpu_without_samples_leaves_the_job_undecided():
    devs = [Dev("n/0", "n", "0", [START + 30 * i for i in range(400)], [0.0] * 400)]
    v = verdict(devs, IdleRule(window_min=60), end=START + 12000, gpus=2)
    assert v.flagged_at is None and v.undecided == "series for 1 of 2 GPUs"


def test_no_samples_is_undecided():
    assert verdict([], IdleRule(), end=START + 9000, gpus=1).undecided == "no samples"


def test_shorter_than_the_window_is_never_flagged():
    devs = [Dev("n/0", "n", "0", [START + 30 * i for i in range(100)], [0.0] * 100)]
    assert verdict(devs, IdleRule(window_min=60), end=START + 3000).flagged_at is None


def test_memory_held_rule_needs_memory_on_the_device():
    times = tuple(START + 30 * i for i in range(300))
    held = DeviceSeries(
        "n/0", "n", "0", times, (0.0,) * 300, mem_times=times, mem_used_mib=(20000.0,) * 300
    )
    empty = DeviceSeries(
        "n/0", "n", "0", times, (0.0,) * 300, mem_times=times, mem_used_mib=(0.0,) * 300
    )
    rule = IdleRule(window_min=60, warn_after_min=(), memory_held_mib=1024)
    kw = dict(start=START, end=times[-1], rule=rule, max_gap_s=300, gpus_held=1)
    assert evaluate([held], **kw).flagged_at == START + 3600
    assert evaluate([empty], **kw).flagged_at is None
