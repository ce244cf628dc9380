"""Several sources, one measure per run: preference order, requeues, basis counts."""

from datetime import datetime

from slurmgpu.measure.apply import measure_runs, run_key
from slurmgpu.measure.jobstats import JobstatsSource
from slurmgpu.measure.summary import CollectorSource, GpuSummary, JobSummary, merge_admin_comment
from slurmgpu.model.measure import JobGpuMeasure, RunRef
from tests.unit.measure.jobstats_fixture import gpu_node, jobstats_value

T0 = 1767607200  # 2026-01-05 10:00 UTC


class Recording:
    """A source that remembers which runs it was asked for (to check nobody is asked twice)."""

    name = "recording"

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.warnings = []

    def measures(self, runs):
        self.asked = [r.job_id for r in runs]
        return [
            JobGpuMeasure(r.job_id, "prometheus", 1, 1.0, 1.0, 1.0, r.cluster, r.start)
            for r in runs
        ]


def sg1(job: str, util: float) -> str:
    gpu = GpuSummary(0, None, None, "GPU-0", 81559.0, 10.0, util, 1, 1)
    return merge_admin_comment("", JobSummary(job, "c1", "n1", T0 + 60, T0 + 600, 1, (gpu,)))


def js1(util: float) -> str:
    return jobstats_value({"n1": gpu_node({"0": util}, {"0": 2**30}, {"0": 2**34})}, 600, 1)


def ref(job: str, comment: str, hour: int = 10) -> RunRef:
    return RunRef(
        job, "c1", datetime(2026, 1, 5, hour), datetime(2026, 1, 5, hour, 30), "n1", 1, comment
    )


def test_first_source_wins_and_later_ones_are_asked_only_for_the_rest():
    runs = [
        ref("1", sg1("1", 80) + " " + js1(10)),  # both: the collector wins
        ref("2", js1(20)),
        ref("3", ""),
        ref("3", "", hour=12),  # a requeued run of job 3
    ]
    last = Recording()
    result = measure_runs(runs, [CollectorSource(), JobstatsSource(), last])
    assert result.measured == {"collector": 1, "jobstats": 1, "recording": 2}
    assert last.asked == ["3", "3"]
    assert result.by_run[run_key(runs[0])].util_mean_pct == 80
    assert result.by_run[run_key(runs[1])].source == "jobstats"
    assert {result.by_run[run_key(r)].start for r in runs[2:]} == {r.start for r in runs[2:]}


def test_warnings_of_all_sources_are_collected():
    result = measure_runs([ref("9", "JS1:H4sInotbase64")], [CollectorSource(), JobstatsSource()])
    assert result.by_run == {} and [w.kind for w in result.warnings] == ["undecodable"]
