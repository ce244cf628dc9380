"""One generated Helios-shaped month (with its reference-scheduled "recorded" starts) per test
session: generating it runs the per-node reference scheduler (~10 s)."""

import pytest

from slurmgpu.replay import ReplayOptions
from slurmgpu.replay.cluster import QosSpec
from tests.unit.advice.helios_month import PARTS, month, replay_trace_of, sacct_text

CAPACITY = {name: n * per for name, (n, per) in PARTS.items()}
QOS = (QosSpec("p0", 1000), QosSpec("normal", 100))


@pytest.fixture(scope="session")
def month_jobs():
    return month(3, days=2)


@pytest.fixture(scope="session")
def month_trace(month_jobs):
    return replay_trace_of(month_jobs)


@pytest.fixture(scope="session")
def month_file(month_jobs, tmp_path_factory):
    path = tmp_path_factory.mktemp("helios") / "month.sacct"
    path.write_text(sacct_text(month_jobs), encoding="utf-8")
    return path


def options(**kw):
    return ReplayOptions(capacity=CAPACITY, qos=QOS, **kw)
