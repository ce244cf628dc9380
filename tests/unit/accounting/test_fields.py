"""Times, durations, states and job ids as sacct prints them."""

import numpy as np
import pyarrow as pa
import pytest

from slurmgpu.accounting import fields


def arr(*values):
    return pa.array(list(values), pa.string())


def test_times_epoch_iso_unknown_none():
    t, bad = fields.parse_times(
        arr("1764547200", "2026-08-11T14:36:24", "Unknown", "None", "", "yesterday")
    )
    assert t[0] == np.datetime64("2025-12-01T00:00:00")
    assert t[1] == np.datetime64("2026-08-11T14:36:24")
    assert np.isnat(t[2:5]).all()
    assert list(bad) == [False, False, False, False, False, True]


def test_iso_times_in_a_named_zone_become_utc():
    t, bad = fields.parse_times(arr("2026-08-11T14:36:24"), timezone="America/New_York")
    assert t[0] == np.datetime64("2026-08-11T18:36:24") and not bad[0]


def test_impossible_iso_date_is_bad():
    _t, bad = fields.parse_times(arr("2026-02-30T00:00:00"))
    assert bad[0]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1-02:03:04", 93784),
        ("00:02:00", 120),
        ("2-22:03:04", 252184),
        ("31:09.458", 1869.458),
        ("00:00.001", 0.001),
        ("07:30:20", 27020),
        ("1-12", 129600),
        ("3-00:00:00", 259200),
    ],
)
def test_durations(text, seconds):
    s, unl, bad = fields.parse_durations(arr(text))
    assert s[0] == pytest.approx(seconds) and not unl[0] and not bad[0]


def test_unlimited_and_bad_durations():
    s, unl, bad = fields.parse_durations(arr("UNLIMITED", "Partition_Limit", "", "soon"))
    assert np.isnan(s).all()
    assert list(unl) == [True, True, False, False]
    assert list(bad) == [False, False, False, True]


def test_states():
    st, uid, bad = fields.parse_states(
        arr(
            "CANCELLED by 1000",
            "CANCELLED by 0",
            "PREEMPTED",
            "NODE_FAIL",
            "REQUEUED",
            "OUT_OF_MEMORY",
            "RUNNING",
            "WEIRD state",
        )
    )
    assert st.to_pylist()[:7] == [
        "CANCELLED",
        "CANCELLED",
        "PREEMPTED",
        "NODE_FAIL",
        "REQUEUED",
        "OUT_OF_MEMORY",
        "RUNNING",
    ]
    assert uid[0] == 1000 and uid[1] == 0 and np.isnan(uid[2])
    assert list(bad) == [False] * 7 + [True]


def test_job_id_forms():
    ids = fields.JobIds(
        arr(
            "123",
            "123_4",
            "4103947_[9-11,13,16-20]",
            "123+1",
            "123.batch",
            "123.extern",
            "123+1.0",
            "12x",
        ),
        arr("123", "130", "4103947", "124", "123.batch", "123.extern", "124.0", "12"),
    )
    assert list(ids.bad) == [False] * 7 + [True]
    assert ids.array_task[1] == 4 and ids.raw[1] == 130
    assert ids.array_range[2] == "9-11,13,16-20"
    assert ids.het_offset[3] == 1 and ids.base_job[3] == 123
    assert list(ids.step[:7]) == [None, None, None, None, "batch", "extern", "0"]
    assert list(ids.is_step[:7]) == [False, False, False, False, True, True, True]
