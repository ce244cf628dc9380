"""A real single-host Slurm (munge, MariaDB, slurmdbd, slurmctld, slurmd) for the tests."""

from tests.harness.cluster import (
    DEFAULT_GRES_CONF,
    DEFAULT_NODE_LINE,
    DEFAULT_PARTITIONS,
    ClusterError,
    CommandFailed,
    GresCheck,
    SlurmCluster,
    missing_binaries,
    validate_gres,
)

__all__ = [
    "DEFAULT_GRES_CONF",
    "DEFAULT_NODE_LINE",
    "DEFAULT_PARTITIONS",
    "ClusterError",
    "CommandFailed",
    "GresCheck",
    "SlurmCluster",
    "missing_binaries",
    "validate_gres",
]
