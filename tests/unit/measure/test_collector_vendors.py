"""The collector on AMD (amdsmi double) and Ascend (libdcmi C double): per-job use from the
device nodes each job's processes hold open (`/proc/PID/fd` -> renderD / davinci minors),
mapped to jobs through their cgroups, summarised per job as for NVIDIA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurmgpu.measure.collector import CollectOptions, collect
from slurmgpu.measure.collector.holders import device_holders
from slurmgpu.measure.collector.state import CollectorState, job_summary
from slurmgpu.measure.collector.vendors import sample_accelerators
from tests.doubles import libdcmi
from tests.doubles.machines import load_double, variant
from tests.unit.tools import need

V1 = "4:devices:/slurm/uid_{uid}/job_{job}/step_0/task_0\n"
V2 = "0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


def _host(root: Path, procs: dict[int, tuple[str, int, int, list[str]]]) -> Path:
    """A host tree: per PID (cgroup form, job, uid, device nodes it holds open)."""
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text(
        "alice:x:1000:1000::/:/bin/sh\nbob:x:1001:1001::/:/bin/sh\n"
    )
    for pid, (form, job, uid, nodes) in procs.items():
        proc = root / "proc" / str(pid)
        (proc / "fd").mkdir(parents=True)
        (proc / "cgroup").write_text(form.format(uid=uid, job=job) if job else "0::/user.slice\n")
        (proc / "status").write_text(f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (proc / "fd" / "0").symlink_to("/dev/null")
        for fd, node in enumerate(nodes, start=3):
            (proc / "fd" / str(fd)).symlink_to(node)
    return root


@pytest.fixture
def amd(monkeypatch, tmp_path):
    module = load_double("amdsmi")
    monkeypatch.setitem(sys.modules, "amdsmi", module)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVIDIA here: NVML not importable
    monkeypatch.setenv("SLURMGPU_DCMI_LIBRARY", str(tmp_path / "no-libdcmi.so"))
    return module


def _cpx_load(data: dict) -> None:
    data["amdsmi"]["compute_partition"] = "CPX"
    data["amdsmi"]["memory_partition"] = "NPS4"
    data["amdsmi"]["load"] = {
        "128": {"gfx_activity": 90, "vram_used_mib": 20000},
        "136": {"gfx_activity": 10, "vram_used_mib": 1000},
        "137": {"gfx_activity": "N/A", "vram_used_mib": 500},
    }


def test_amd_partitions_give_per_job_use(amd, tmp_path):
    amd.use_machine(variant(tmp_path, "mi300x-8gpu", _cpx_load))
    host = _host(
        tmp_path / "host",
        {
            # job 51 (v1) on package 0's first partition; job 52 (v2) on two others
            4001: (V1, 51, 1000, ["/dev/dri/renderD128", "/dev/kfd"]),
            4002: (V2, 52, 1001, ["/dev/dri/renderD136"]),
            4003: (V2, 52, 1001, ["/dev/dri/renderD137", "/dev/dri/renderD136"]),
            4004: ("", 0, 1000, ["/dev/dri/renderD129"]),  # a login shell, not a job
        },
    )
    assert device_holders(host)["/dev/dri/renderD136"] == (4002, 4003)
    sample = sample_accelerators(host)
    assert len(sample.devices) == 64 and sample.errors == []  # NVML/DCMI absence is quiet
    opts = CollectOptions(state=tmp_path / "state.json", node="mi01", host_root=host)
    result = collect(opts, sample)
    assert result.jobs == ["51", "52"]
    state = CollectorState.from_json((tmp_path / "state.json").read_text())
    s51 = job_summary(state, "51", node="mi01", cluster="")
    (gpu,) = s51.gpus
    assert (gpu.minor, gpu.util_mean_pct, gpu.mem_max_mib) == (128, 90.0, 20000.0)
    assert gpu.mem_total_mib == pytest.approx(196608 / 8)  # one CPX partition's share
    s52 = job_summary(state, "52", node="mi01", cluster="")
    assert [(g.minor, g.util_mean_pct, g.mem_max_mib) for g in s52.gpus] == [
        (136, 10.0, 1000.0),
        (137, None, 500.0),  # amdsmi said N/A: unknown, not 0
    ]
    assert state.jobs["52"].user == "bob"


def test_ascend_npus_give_per_job_use(amd, monkeypatch, tmp_path):
    def load(data):
        for npu in data["gpus"]:
            npu["hbm_used_mib"] = 3300
        data["gpus"][2].update(hbm_used_mib=40000, aicore_util_pct=75)
        data["gpus"][3].update(hbm_used_mib=12000, aicore_util_pct=-1)  # rate not supported

    path = variant(tmp_path, "atlas-800t-a2", load)
    need("gcc")  # the libdcmi double is compiled
    monkeypatch.setenv("SLURMGPU_DCMI_LIBRARY", str(libdcmi.build(path, tmp_path / "dcmi")))
    amd.use_machine(path)  # no AMD GPU on this node: amdsmi does not initialise
    host = _host(
        tmp_path / "host",
        {5001: (V2, 61, 1000, ["/dev/davinci2", "/dev/davinci3", "/dev/davinci_manager"])},
    )
    sample = sample_accelerators(host)
    assert len(sample.devices) == 8 and sample.errors == []
    opts = CollectOptions(state=tmp_path / "state.json", node="atlas01", host_root=host)
    assert collect(opts, sample).jobs == ["61"]
    state = CollectorState.from_json((tmp_path / "state.json").read_text())
    npus = job_summary(state, "61", node="atlas01", cluster="").gpus
    assert [(g.minor, g.util_mean_pct, g.mem_max_mib, g.mem_total_mib) for g in npus] == [
        (2, 75.0, 40000.0, 65536.0),
        (3, None, 12000.0, 65536.0),
    ]
    # the state keeps NPUs apart from a mixed node's GPUs of the same minor
    assert set(state.jobs["61"].gpus) == {"davinci2", "davinci3"}


def test_no_vendor_at_all_says_why_for_each(amd, tmp_path):
    amd.use_machine(None)
    sample = sample_accelerators(tmp_path)
    assert sample.devices == []
    assert [e.split(":")[0] for e in sample.errors] == ["NVML", "amdsmi", "DCMI"]


def test_amd_energy_accumulator_gives_the_jobs_energy_and_partitions_give_none(amd, tmp_path):
    host = _host(tmp_path / "host", {4001: (V1, 51, 1000, ["/dev/dri/renderD128"])})
    state = tmp_path / "state.json"
    for accumulator in (10**9, 10**9 + 10**8):

        def load(data, accumulator=accumulator):
            data["amdsmi"]["load"] = {
                "128": {"gfx_activity": 50, "energy_accumulator": accumulator}
            }

        amd.use_machine(variant(tmp_path, "mi300x-8gpu", load))
        collect(CollectOptions(state=state, node="mi01", host_root=host))
    s51 = job_summary(CollectorState.from_json(state.read_text()), "51", node="mi01", cluster="")
    (gpu,) = s51.gpus
    # 1e8 counts x 15.3 uJ (the double's resolution) = 1530 J
    assert gpu.energy_j == pytest.approx(10**8 * 15.3e-6, rel=0.01) and not gpu.energy_estimated

    def cpx(data):
        _cpx_load(data)
        data["amdsmi"]["load"]["128"]["energy_accumulator"] = 10**9

    amd.use_machine(variant(tmp_path, "mi300x-8gpu", cpx))
    assert sample_accelerators(host).energy == {}  # a partition's counter is its package's
