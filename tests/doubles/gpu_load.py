"""Work put on recorded machines for the collector tests: processes and utilization.

The pynvml double serves a GPU's "processes" and "utilization" (and a MIG device's
"processes"); these functions add them to a recorded machine (use with `machines.variant`).
The PIDs are those of the recorded host tree `tests/data/collect/host` (see its README).
"""

from __future__ import annotations

from tests.doubles.machines import ROOT

COLLECT_HOST = ROOT / "tests" / "data" / "collect" / "host"
GIB_MIB = 1024


def load_h100(data: dict, util: list[int]) -> None:
    """GPU 0: job 4242 (v1); GPU 1: jobs 4242 and 4243 (v2) share it; GPU 2: no Slurm job."""
    gpus = data["gpus"]
    for gpu, pct in zip(gpus, util, strict=False):
        gpu["utilization"] = {"gpu": pct, "memory": pct // 2}
    gpus[0]["processes"] = [{"pid": 2101, "used_memory_mib": 30 * GIB_MIB}]
    gpus[1]["processes"] = [
        {"pid": 2102, "used_memory_mib": 2 * GIB_MIB},
        {"pid": 2203, "used_memory_mib": None},  # NVML_VALUE_NOT_AVAILABLE
    ]
    gpus[2]["processes"] = [{"pid": 2304, "used_memory_mib": 100}]


def load_mig(data: dict) -> None:
    """Job 4250 on two MIG instances of GPU 1 (3g.20gb) and one of GPU 2 (1g.10gb)."""
    gpus = data["gpus"]
    gpus[1]["mig_devices"][0]["processes"] = [{"pid": 2405, "used_memory_mib": 15000}]
    gpus[1]["mig_devices"][1]["processes"] = [{"pid": 2406, "used_memory_mib": 1000}]
    gpus[2]["mig_devices"][2]["processes"] = [{"pid": 2406, "used_memory_mib": 500}]
