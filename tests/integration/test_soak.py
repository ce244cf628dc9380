"""The soak, CI size (issue #33): slurmgpu's acting set deployed on the multi-node cluster as a
site would (collector Epilog, the tiers' job_submit module beside a site script, `idle --live`
cancelling, `autopilot` applying, report and ingest passes), ~160 seeded submissions (tiers
P0/P1/P2, arrays, interactive allocations, busy, idle and garbage-sample jobs) over two
minutes while the faults of tests/harness/soak.py are injected: slurmctld restart,
`scontrol reconfigure`, a node drained and one set DOWN (both resumed), Prometheus stopped and
frozen, the mail server stopped, the state disk full, timer passes SIGKILLed at seeded random
points and overlapping passes. Then every invariant is checked; the test fails listing each
one that does not hold with its evidence. The long run is benchmarks/soak.py.
"""

from __future__ import annotations

import pytest

from tests.harness.soak import QOS, Soak, SoakConfig

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only(
        "host",
        reason="the soak checks slurmgpu's own invariants under faults; the commands it runs "
        "have their per-release tests (~4 minutes)",
    ),
]


def test_soak_under_faults_keeps_every_invariant(fleet_cluster, tmp_path) -> None:
    soak = Soak(fleet_cluster, SoakConfig(), tmp_path / "soak")
    try:
        result = soak.run()
    finally:
        soak.down()
        fleet_cluster.reset()
        fleet_cluster.sacctmgr("delete", "qos", ",".join(QOS.values()), check=False)
    print(result.report())
    figures = result.figures()
    # the soak did what it claims (else its invariants would hold vacuously)
    assert len(result.faults) == 8, figures["faults"]
    assert result.jobs_in_sacct >= result.config.jobs, figures
    assert figures["timers"]["idle"]["killed"] > 0, figures["timers"]
    assert sum(t["overlapping"] for t in figures["timers"].values()) > 0, figures["timers"]
    assert result.actions["cancelled_in_sacct"] > 0, result.actions  # the reaper did act
    failed = result.failed()
    assert not failed, "invariants that do not hold:\n" + "\n".join(i.line() for i in failed)
