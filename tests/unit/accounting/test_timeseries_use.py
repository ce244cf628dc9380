"""The time series' measured use and bucket lengths (the headline plot's data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from slurmgpu.accounting.metrics import timeseries
from slurmgpu.accounting.window import Window


def t(s: str) -> np.datetime64:
    return np.datetime64(s, "s")


def test_measured_use_per_bucket_and_the_cut_last_bucket():
    # 00:00-02:30; run a: 4 GPUs 00:00-02:00 at 50 %; run b: 2 GPUs 01:00-02:30, unmeasured
    work = pd.DataFrame(
        {
            "start": [t("2026-12-01T00:00"), t("2026-12-01T01:00")],
            "end": [t("2026-12-01T02:00"), t("2026-12-01T02:30")],
            "gpus": [4.0, 2.0],
            "util": [50.0, np.nan],
        }
    )
    window = Window(t("2026-12-01T00:00"), t("2026-12-01T02:30"))
    ts = timeseries(work, window, 8.0, "1h")
    assert [p.hours for p in ts.points] == [1.0, 1.0, 0.5]
    assert [p.gpu_hours_allocated for p in ts.points] == pytest.approx([4.0, 6.0, 1.0])
    assert [p.capacity_gpu_hours for p in ts.points] == pytest.approx([8.0, 8.0, 4.0])
    assert [p.gpu_hours_used for p in ts.points] == pytest.approx([2.0, 2.0, None])
    assert [p.util_known_gpu_hours for p in ts.points] == pytest.approx([4.0, 4.0, 0.0])
    last = ts.points[-1]
    assert last.per_full_bucket(last.capacity_gpu_hours, 1.0) == pytest.approx(8.0)
    assert last.allocation_ratio == pytest.approx(0.25)


def test_no_measurement_anywhere_is_none_not_zero():
    work = pd.DataFrame(
        {"start": [t("2026-12-01T00:00")], "end": [t("2026-12-01T01:00")], "gpus": [1.0]}
    )
    ts = timeseries(work, Window(t("2026-12-01T00:00"), t("2026-12-01T01:00")), None, "1h")
    assert ts.points[0].gpu_hours_used is None and ts.points[0].util_known_gpu_hours is None
