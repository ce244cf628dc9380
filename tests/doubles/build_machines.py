"""Build tests/data/machines/*.json (recorded machines for the pynvml double) from the facts.

Run `python tests/doubles/build_machines.py` after changing a fact; the test
tests/unit/sources/test_machines_fresh.py fails when the committed files drift from this.

Facts (public sources, see each machine's "source"): DGX A100 40GB (2x64-core EPYC, NPS4, 6
NVSwitches, 12 links per GPU, 2 per switch), DGX H100 (2x56-core Xeon, 4 NVSwitches, 18 links
per GPU split 4/5/5/4), 8x RTX 4090 PCIe (no NVLink: NOT_SUPPORTED). Picks where the sources
are silent are marked "pick" in each machine's "about".
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "machines"
NAMESPACE = uuid.UUID("6f1c8f0e-4a55-4c1b-9a0e-5f1d2b3c4d5e")

# MIG profiles used below: name -> (gpu slices, memory MiB NVML reports) (facts: mig-profiles)
A100_40_PROFILES = {
    "1g.5gb": (1, 4864),
    "1g.10gb": (1, 9856),
    "2g.10gb": (2, 9856),
    "3g.20gb": (3, 19968),
    "4g.20gb": (4, 19968),
    "7g.40gb": (7, 40192),
}


# NVML GPU-instance profile tables the double serves (nvmlDeviceGetGpuInstanceProfileInfo,
# ...PossiblePlacements): (name, nvidia-smi profile id, NVML profile enum, compute slices,
# placement size in memory slices, max instances, placement starts), then memory MiB and SMs.
# facts: mig-profiles.json (real -lgip/-lgipp ids and placements; memory as the catalogue)
_G7 = [
    (19, 0, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    (20, 7, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    (15, 9, 1, 2, 4, (0, 2, 4, 6)),
    (14, 1, 2, 2, 3, (0, 2, 4)),
    (9, 2, 3, 4, 2, (0, 4)),
    (5, 3, 4, 4, 1, (0,)),
    (0, 4, 7, 8, 1, (0,)),
]


def _profile_table(names_mib: list[tuple[str, int]], sms: tuple[int, ...]) -> list[dict]:
    return [
        {
            "name": name,
            "id": pid,
            "enum": enum,
            "slices": g,
            "memory_slices": size,
            "instances": most,
            "memory_mib": mib,
            "placements": list(starts),
            "sm": sm,
        }
        for (name, mib), (pid, enum, g, size, most, starts), sm in zip(
            names_mib, _G7, sms, strict=True
        )
    ]


A100_40_TABLE = [
    ("1g.5gb", 4864),
    ("1g.5gb+me", 4864),
    ("1g.10gb", 9856),
    ("2g.10gb", 9856),
    ("3g.20gb", 19968),
    ("4g.20gb", 19968),
    ("7g.40gb", 40192),
]
H100_80_TABLE = [
    ("1g.10gb", 9984),
    ("1g.10gb+me", 9984),
    ("1g.20gb", 20091),
    ("2g.20gb", 20091),
    ("3g.40gb", 40448),
    ("4g.40gb", 40448),
    ("7g.80gb", 81152),
]


def _uuid(kind: str, *parts: object) -> str:
    return f"{kind}-{uuid.uuid5(NAMESPACE, '/'.join(map(str, parts)))}"


def _gpu(machine, index, *, minor, name, memory_mib, bus, numa, affinity, device_id, **extra):
    gpu = {
        "index": index,
        "minor_number": minor,
        "uuid": _uuid("GPU", machine, index),
        "name": name,
        "memory_total_bytes": memory_mib * 2**20,
        "pci_bus_id": bus,
        "pci_device_id": device_id,
        "numa_node": numa,
        "cpu_affinity": affinity,
    }
    gpu.update(extra)
    return gpu


def _migs(machine, gpu_index, layout):
    """layout: [(profile, gi_id, ci_id)] -> NVML MIG device records (index = creation order)."""
    out = []
    for i, (profile, gi, ci) in enumerate(layout):
        slices, mem = A100_40_PROFILES[profile]
        out.append(
            {
                "index": i,
                "gi_id": gi,
                "ci_id": ci,
                "profile": profile,
                "gpu_slices": slices,
                "memory_mib": mem,
                "uuid": _uuid("MIG", machine, gpu_index, gi, ci),
            }
        )
    return out


def _switch_links(per_switch: list[tuple[str, int]], version: int) -> dict:
    links = []
    for bus, count in per_switch:
        links += [
            {"state": 1, "version": version, "remote_pci_bus_id": bus, "remote_type": 2}
        ] * count
    return {"links": links}


def dgx_a100() -> dict:
    m = "dgx-a100-mig"
    buses = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]
    numa = [3, 3, 1, 1, 7, 7, 5, 5]
    numa_cpus = {n: f"{16 * n}-{16 * n + 15},{128 + 16 * n}-{128 + 16 * n + 15}" for n in range(8)}
    switches = [(f"00000000:{b}:00.0", 2) for b in ("C4", "C5", "C6", "C7", "C8", "C9")]
    mig_layouts = {
        # GI ids follow the placement-derived numbering seen on real GPUs (1g at start s
        # -> gi 7+s; 2g at start s -> gi 3+s/2; 3g -> gi 1/2; 4g -> gi 1): pick
        0: [("1g.5gb", 7 + s, 0) for s in range(7)],
        1: [("3g.20gb", 1, 0), ("3g.20gb", 2, 0)],
        2: [("4g.20gb", 1, 0), ("2g.10gb", 5, 0), ("1g.10gb", 6, 0)],
    }
    gpus = []
    for i in range(8):
        extra = {"mig_mode": [1, 1] if i in mig_layouts else [0, 0], "max_mig_devices": 7}
        extra["mig_devices"] = _migs(m, i, mig_layouts.get(i, []))
        extra["nvlink"] = _switch_links(switches, 3)
        gpus.append(
            _gpu(
                m,
                i,
                minor=i,
                name="NVIDIA A100-SXM4-40GB",
                memory_mib=40960,
                bus=f"00000000:{buses[i]}:00.0",
                numa=numa[i],
                affinity=numa_cpus[numa[i]],
                device_id="0x20B010DE",
                **extra,
            )
        )
    return {
        "about": "DGX A100 40GB, NPS4, 6 NVSwitches; MIG mixed mode on GPUs 0-2 "
        "(pick: 7x1g.5gb / 2x3g.20gb / 4g.20gb+2g.10gb+1g.10gb); memory, driver: pick",
        "source": "facts/nvml/topo-dgx-a100.json, facts/nvml/mig-profiles.json",
        "driver_version": "535.129.03",
        "nvml_version": "12.535.129.03",
        "mig_profiles": _profile_table(A100_40_TABLE, (14, 14, 14, 28, 42, 56, 98)),
        "gpus": gpus,
        "host": {
            "hostname": "dgxa100",
            "memtotal_kib": 1056462848,
            "sockets": 2,
            "cores_per_socket": 64,
            "threads_per_core": 2,
            "numa_cpus": {str(k): v for k, v in numa_cpus.items()},
            "core_id_gap_every": 0,
            "nvswitch": True,
        },
    }


def dgx_h100() -> dict:
    m = "dgx-h100"
    buses = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    numa_cpus = {0: "0-55,112-167", 1: "56-111,168-223"}
    switches = [
        ("00000000:05:00.0", 4),
        ("00000000:06:00.0", 5),
        ("00000000:07:00.0", 5),
        ("00000000:08:00.0", 4),
    ]
    gpus = []
    for i in range(8):
        n = 0 if i < 4 else 1
        gpus.append(
            _gpu(
                m,
                i,
                minor=i,
                name="NVIDIA H100 80GB HBM3",
                memory_mib=81559,
                bus=f"00000000:{buses[i]}:00.0",
                numa=n,
                affinity=numa_cpus[n],
                device_id="0x233010DE",
                mig_mode=[0, 0],
                max_mig_devices=7,
                mig_devices=[],
                nvlink=_switch_links(switches, 4),
            )
        )
    return {
        "about": "DGX H100, 2x56-core Xeon, 4 NVSwitches (18 links per GPU, 4/5/5/4); "
        "MIG off; Intel core_id numbering with gaps (pick, as on real Xeons); memory, driver: pick",
        "source": "facts/nvml/topo-dgx-h100.json",
        "driver_version": "550.54.15",
        "nvml_version": "12.550.54.15",
        # SMs per profile as a real H100 80GB HBM3 -lgip prints them
        "mig_profiles": _profile_table(H100_80_TABLE, (16, 16, 26, 32, 60, 64, 132)),
        "gpus": gpus,
        "host": {
            "hostname": "dgxh100",
            "memtotal_kib": 2113389308,
            "sockets": 2,
            "cores_per_socket": 56,
            "threads_per_core": 2,
            "numa_cpus": {str(k): v for k, v in numa_cpus.items()},
            "core_id_gap_every": 8,
            "nvswitch": True,
        },
    }


def pcie_8gpu() -> dict:
    m = "pcie-8gpu"
    buses = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    # minor numbers follow driver probe order, not NVML's PCI order (pick: pairs swapped)
    minors = [1, 0, 3, 2, 5, 4, 7, 6]
    numa_cpus = {0: "0-55,112-167", 1: "56-111,168-223"}
    gpus = []
    for i in range(8):
        n = 0 if i < 4 else 1
        gpus.append(
            _gpu(
                m,
                i,
                minor=minors[i],
                name="NVIDIA GeForce RTX 4090",
                memory_mib=24564,
                bus=f"00000000:{buses[i]}:00.0",
                numa=n,
                affinity=numa_cpus[n],
                device_id="0x268410DE",
                mig_mode=None,
                nvlink="not_supported",
            )
        )
    return {
        "about": "8x RTX 4090 PCIe, 2x56 cores; no NVLink (NOT_SUPPORTED), no MIG; "
        "bus ids, memory, driver: pick; minor numbers differ from NVML indices (pick)",
        "source": "facts/nvml/topo-pcie-8gpu.json",
        "driver_version": "550.90.07",
        "nvml_version": "12.550.90.07",
        "gpus": gpus,
        "host": {
            "hostname": "pcie8",
            "memtotal_kib": 528278528,
            "sockets": 2,
            "cores_per_socket": 56,
            "threads_per_core": 2,
            "numa_cpus": {str(k): v for k, v in numa_cpus.items()},
            "core_id_gap_every": 0,
            "nvswitch": False,
        },
    }


def _vendor_machines() -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vendor_machines as vm  # tests/doubles, run as a script or imported

    return {
        "mi300x-8gpu": vm.mi300x_8gpu,
        "mi300x-cpx-nps4": lambda: vm.mi300x_8gpu("CPX", "NPS4"),
        "atlas-800t-a2": vm.atlas_800t_a2,
        "mixed-gpu-npu": lambda: vm.mixed_gpu_npu(_gpu),
    }


MACHINES = {
    "dgx-a100-mig": dgx_a100,
    "dgx-h100": dgx_h100,
    "pcie-8gpu": pcie_8gpu,
    **_vendor_machines(),
}


def render(name: str) -> str:
    return json.dumps(MACHINES[name](), indent=1) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in MACHINES:
        (OUT / f"{name}.json").write_text(render(name), encoding="utf-8")
        print(f"wrote {OUT / (name + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
