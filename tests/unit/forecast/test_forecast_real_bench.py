"""benchmarks/forecast_real.py: the demand it builds from the public traces' shapes, by hand
(the figures in docs/forecast.md rest on it; the traces themselves are not in the
repository)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import forecast_real as fr
from slurmgpu.forecast.demand_file import demand_file_series

OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time"
)


def test_openb_pods_pending_then_running_and_never_scheduled(tmp_path):
    rows = [OPENB_HEADER]
    # 100 LS pods created on day 1 (the dense part starts the next midnight), each holding
    # half a GPU from day 2 + 60 s to day 2 + 180 s after pending 60 s
    day2 = 2 * 86400
    for i in range(100):
        rows.append(f"p{i},1000,1000,1,500,,LS,Running,{86400 + i},{day2 + 180},{day2 + 60}")
    # one pod never scheduled: pending 2 GPUs until it was deleted
    rows.append(f"q,1000,1000,2,1000,,LS,Pending,{day2},{day2 + 120},")
    # a qos with too few pods is left out
    rows.append(f"r,1000,1000,1,1000,,BE,Running,{day2},{day2 + 600},{day2}")
    path = tmp_path / "openb.csv"
    path.write_text("\n".join(rows) + "\n")
    series, start, end = fr.openb_intervals(str(path))
    assert sorted(series) == ["LS"] and start == day2 and end == day2 + 600
    out = tmp_path / "demand.csv"
    fr.write_demand(str(out), series, start, end, fr.T0["openb"])
    y = demand_file_series(str(out), 60).series.demand("LS")
    # minute 0: 100 pods pending x 0.5 + the 2-GPU pod; minutes 1-2: 100 running x 0.5 +
    # the 2-GPU pod pending (to 120 s); then nothing
    np.testing.assert_allclose(y[:4], [52.0, 52.0, 50.0, 0.0])


def test_dlrm_instances_before_the_trace_and_alive_at_its_end(tmp_path):
    header = (
        "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,"
        "rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,"
        "creation_time,scheduled_time,deletion_time"
    )
    rows = [
        header,
        "a,HN,app_1,1,1,1,1,0,0,1,1,1,1,2,,,120",  # alive when the trace began, gone at 120 s
        "b,HN,app_2,1,1,1,1,0,0,1,1,1,1,2,60,120,",  # pending 60-120 s, then alive to the end
        "c,CN,app_2,1,1,0,0,0,0,1,1,1,1,2,0,0,240",  # no GPU: not in the demand
        "d,HN,app_2,1,1,1,1,0,0,1,1,1,1,2,100,100,240",  # the trace's end: 240 s
    ]
    path = tmp_path / "dlrm.csv"
    path.write_text("\n".join(rows) + "\n")
    series, start, end = fr.dlrm_intervals(str(path), top_apps=1)
    assert sorted(series) == ["HN", "app_2"] and (start, end) == (0.0, 240.0)
    out = tmp_path / "demand.csv"
    fr.write_demand(str(out), series, start, end, fr.T0["dlrm"])
    s = demand_file_series(str(out), 60).series
    # minute 0: a; minute 1: a + b pending + d (from 100 s: 20 s of 60); minutes 2-3: b + d
    # (written with 4 decimals)
    np.testing.assert_allclose(s.demand("HN"), [1.0, 2.0 + 1 / 3, 2.0, 2.0], atol=1e-4)
    np.testing.assert_allclose(s.demand("app_2"), [0.0, 1.0 + 1 / 3, 2.0, 2.0], atol=1e-4)


def test_helios_sequences_sum_running_and_pending(tmp_path):
    d = tmp_path / "helios"
    d.mkdir()
    (d / "earth-vcX-sequence.csv").write_text(
        "time,running_gpu_num,pending_gpu_num,total_gpu_num\n"
        "2020-05-01 00:00:00,4,2,64\n2020-05-01 00:01:00,5,0,64\n"
    )
    out = tmp_path / "out"

    class Args:
        helios_dir, philly, openb, dlrm, top_apps = str(d), None, None, None, 8

    Args.out = str(out)
    fr.build(Args)
    s = demand_file_series(str(out / "helios.csv"), 60).series
    assert s.partitions == ["vcX"]
    np.testing.assert_allclose(s.demand("vcX"), [6.0, 5.0])


def test_gain_and_partition_gains():
    row = {"test_smape": {"seasonal-naive": 20.0, "ridge": 15.0}, "picked_smape": 10.0}
    assert fr.gain(row) == pytest.approx(0.5)
    assert fr.gain(row, "ridge") == pytest.approx(0.25)
    exact = {"test_smape": {"seasonal-naive": 0.0}, "picked_smape": 3.0}
    assert fr.gain(exact) == -1.0  # seasonal-naive was exact: anything else is worse
    assert fr.gain({**exact, "picked_smape": 0.0}) == 0.0
    table = [
        {"source": "s", "freq": "1m", "partition": "p", "picked": "ridge", "picked_smape": 8.0,
         "test_smape": {"seasonal-naive": 10.0}},
        {"source": "s", "freq": "1m", "partition": "p", "picked": "ridge", "picked_smape": 14.0,
         "test_smape": {"seasonal-naive": 12.0}},
        {"source": "s", "freq": "1m", "partition": "p", "picked": "seasonal-naive",
         "picked_smape": 50.0, "test_smape": {"seasonal-naive": 50.0}},
    ]  # fmt: skip
    # the picked days together: (8 + 14) / 2 against (10 + 12) / 2: no gain; day 3 not in it
    assert fr.partition_gains(table) == {("s", "1m", "p"): pytest.approx(0.0)}


def _prow(cut, part, picked, got, naive):
    return {"source": "s", "freq": "1h", "horizon": "7d", "cut": cut, "partition": part,
            "picked": picked, "picked_smape": got, "naive_smape": naive}  # fmt: skip


def test_protocol_summary_is_the_acceptance_yes_no_per_cut():
    rows = [
        # cut 1: two learned picks, both better than seasonal-naive
        _prow("c1", "a", "level-ridge", 10.0, 20.0),
        _prow("c1", "b", "blend", 5.0, 10.0),
        _prow("c1", "c", "seasonal-naive", 30.0, 30.0),
        # cut 2: one pick lost (a tie is not a win), one won
        _prow("c2", "a", "level-ridge", 20.0, 20.0),
        _prow("c2", "b", "ridge", 2.0, 10.0),
        _prow("c2", "c", "seasonal-naive", 30.0, 30.0),
        # cut 3: no learned pick: nothing lost
        _prow("c3", "a", "seasonal-naive", 20.0, 20.0),
        # cut 4: seasonal-naive was exact and the pick was not
        _prow("c4", "a", "ridge", 1.0, 0.0),
    ]
    got = fr.protocol_summary(rows)
    assert got["cuts"] == 4 and got["cuts_all_won"] == 2 and got["cuts_with_a_pick"] == 3
    assert (got["picked"], got["partition_cuts"], got["lost"]) == (5, 8, 2)
    # gains 0.5, 0.5, 0, 0.8, -1
    assert got["mean_gain"] == pytest.approx((0.5 + 0.5 + 0.0 + 0.8 - 1.0) / 5)
    assert got["worst"] == -1.0
    table = fr.protocol_table(rows)
    # per partition over its picked cuts: a 31/3 against 40/3, b 7/2 against 20/2: neither worse
    assert (got["partitions_picked"], got["partitions_worse"]) == (2, [])
    assert "| s | 1h | 7d | 4 | 2 | 3 | 5 of 8 | +16% | 2 (-100%) | 2 | 0 |" in table


def test_a_partition_is_worse_when_its_picked_cuts_together_lost():
    picks = [
        _prow("c1", "a", "ridge", 10.0, 20.0),  # won by 10 ...
        _prow("c2", "a", "ridge", 40.0, 25.0),  # ... lost by 15: 50 against 45, worse
        _prow("c1", "b", "ridge", 30.0, 20.0),  # lost by 10 ...
        _prow("c2", "b", "ridge", 5.0, 20.0),  # ... won by 15: 35 against 40, better
        _prow("c1", "c", "ridge", 20.0, 20.0),  # a tie is not a win
    ]
    got = fr.partitions_worse(picks)
    assert got == {"partitions_picked": 3, "partitions_worse": ["a", "c"]}
    assert fr._worse(fr.protocol_summary(picks)) == "2 (a, c)"
