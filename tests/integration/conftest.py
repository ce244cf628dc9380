"""The session's real Slurm cluster, and the `integration` mark on every test here.

A machine without Slurm, munge or MariaDB fails these tests (it does not skip them): CI must
show that the integration tests ran against real daemons.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import SlurmCluster, missing_binaries
from tests.harness.cluster import ClusterError, enter_private_munge

# which Slurm release the session runs (SLURMGPU_TEST_SLURM, `scripts/run-tests --slurm`):
# an autouse session fixture activates it before any cluster starts; see docs/testing.md
from tests.harness.releases import (  # noqa: F401  (fixtures pytest finds by name here)
    deselect_other_releases,
    report_left_out,
    slurm_release,
    slurm_series,
)

HERE = Path(__file__).resolve().parent
SETUP_HINT = "run the README's test command as root: sudo ./scripts/run-tests"


def pytest_configure(config: pytest.Config) -> None:
    # the session's own node locks: every acting command locks in $SLURMGPU_LOCK_DIR (else
    # /var/lib/slurmgpu/locks, shared by every session on the host, where two sessions' test
    # clusters both name their node gpu01); the commands the tests run inherit it
    locks = tempfile.mkdtemp(prefix="slurmgpu-test-locks-")
    os.environ["SLURMGPU_LOCK_DIR"] = locks
    config.add_cleanup(lambda: shutil.rmtree(locks, ignore_errors=True))
    # the session's own /run/munge (a private mount namespace, tests/harness/cluster.py), set
    # up before any thread or daemon starts; without root the tests fail in require_slurm()
    if os.geteuid() == 0:
        # where unshare is refused, the first cluster's up() raises saying so
        with contextlib.suppress(ClusterError):
            enter_private_munge()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)
    deselect_other_releases(config, items)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    report_left_out(terminalreporter, config)  # what this release's run left out, and why


def require_slurm() -> None:
    """Fail (never skip) with a clear message when the cluster cannot run here."""
    missing = missing_binaries()
    if missing:
        pytest.fail(
            "the real-Slurm integration tests need programs that are not installed: "
            + ", ".join(missing)
            + f"; {SETUP_HINT} (it installs Debian's Slurm, munge and MariaDB packages)",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail(
            f"the real-Slurm integration tests must run as root (slurmd, mknod); {SETUP_HINT}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One real cluster (node gpu01, 8 fake H100s, accounting) for the whole session.

    Set SLURMGPU_KEEP_CLUSTER=1 to keep its temp directory (logs, configs) after the run.
    """
    require_slurm()
    cluster = SlurmCluster(keep=bool(os.environ.get("SLURMGPU_KEEP_CLUSTER")))
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


# -- fleet (issue #11): the multi-node cluster, separate from the fast single-node one --------
FLEET_NODES = ("gpu01=dgx-h100", "gpu02=dgx-h100", "gpu03=dgx-a100-mig", "gpu04=pcie-8gpu")


@pytest.fixture(scope="session")
def fleet_cluster():
    """Four namespaced slurmds (2 DGX H100, 1 DGX A100 with MIG, 1 PCIe RTX 4090 box).

    Each node has its own host name, address on a private bridge, /dev with its own fake GPUs
    and recorded host tree (tests/harness/multinode.py). Tests that reconfigure it put the
    defaults back (`reset()`) before they end.
    """
    from tests.harness.multinode import MultiNodeCluster

    require_slurm()
    cluster = MultiNodeCluster(
        nodes=FLEET_NODES, keep=bool(os.environ.get("SLURMGPU_KEEP_CLUSTER"))
    )
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()
