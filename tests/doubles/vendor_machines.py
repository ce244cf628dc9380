"""Recorded AMD, Ascend and mixed machines for the amdsmi / npu-smi / DCMI doubles.

Built by tests/doubles/build_machines.py (which writes every machine file); the facts and
their public sources are listed in tests/data/machines/SOURCES.md. Where the sources are
silent the value is a pick and the machine's "about" says so.
"""

from __future__ import annotations

import uuid

NAMESPACE = uuid.UUID("0b7f3a51-2d34-4c71-8e5f-a1c2d3e4f506")


def _uuid(*parts: object) -> str:
    return str(uuid.uuid5(NAMESPACE, "/".join(map(str, parts))))


def _die_id(*parts: object) -> list[int]:
    raw = uuid.uuid5(NAMESPACE, "/".join(map(str, parts))).int
    return [(raw >> (32 * i)) & 0xFFFFFFFF for i in range(4)] + [0x910B]


def _mi300x(machine: str, i: int, bus: str, numa: int, peers: list[str]) -> dict:
    return {
        "vendor": "amd",
        "index": i,
        "bdf": f"0000:{bus}:00.0",
        "uuid": _uuid(machine, i),
        "market_name": "AMD Instinct MI300X",
        "device_id": "0x74a1",
        "vram_mib": 196608,
        "compute_units": 304,
        "gfx": "gfx942",
        "numa_node": numa,
        "render_minor": 128 + i,
        "kfd_id": 10000 + 1000 * i,
        "oam_id": i,
        "xgmi_peers": [p for p in peers if p != f"0000:{bus}:00.0"],
    }


def mi300x_8gpu(compute: str = "SPX", memory: str = "NPS1") -> dict:
    m = "mi300x-8gpu"
    buses = ["05", "26", "46", "65", "85", "a6", "c6", "e5"]
    bdfs = [f"0000:{b}:00.0" for b in buses]
    numa_cpus = {0: "0-95,192-287", 1: "96-191,288-383"}
    gpus = [_mi300x(m, i, buses[i], 0 if i < 4 else 1, bdfs) for i in range(8)]
    return {
        "about": "8x AMD Instinct MI300X (OAM, Infinity Fabric full mesh: 1 XGMI link per "
        f"pair), 2x96-core EPYC 9654 SMT2, NPS1 host; partition mode {compute}/{memory}; bus "
        "ids (pick except c6, seen on an AS-8125GS-TNMR2), render minors 128+i with partition "
        "nodes after the 8 PCI nodes (pick), driver/library versions: pick",
        "source": "tests/data/machines/SOURCES.md#mi300x",
        "amdsmi": {
            "driver_version": "6.10.5",
            "lib_version": [25, 5, 1, 0],
            "compute_partition": compute,
            "memory_partition": memory,
        },
        "gpus": gpus,
        "host": {
            "hostname": "mi300x" if compute == "SPX" else f"mi300x{compute.lower()}",
            "memtotal_kib": 2376530652,
            "sockets": 2,
            "cores_per_socket": 96,
            "threads_per_core": 2,
            "numa_cpus": {str(k): v for k, v in numa_cpus.items()},
            "core_id_gap_every": 0,
            "nvswitch": False,
        },
    }


def _npu(machine: str, i: int, bus: str, numa: int, cpus: str, name: str, hbm: int, aicore: int):
    return {
        "vendor": "ascend",
        "index": i,
        "phy_id": i,
        "card_id": i,
        "device_id": 0,
        "chip": name,
        "chip_type": "Ascend",
        "aicore_count": aicore,
        "bus_id": f"0000:{bus}:00.0",
        "hbm_mib": hbm,
        "numa_node": numa,
        "cpu_affinity": cpus,
        "die_id": _die_id(machine, i),
        "health": "OK",
    }


def atlas_800t_a2() -> dict:
    m = "atlas-800t-a2"
    buses = ["C1", "C2", "81", "82", "41", "42", "01", "02"]
    # 4x Kunpeng 920 (48 cores, no SMT): 8 NUMA nodes of 24 cores; NPUs by PCI root (pick)
    numa_of = [6, 6, 4, 4, 2, 2, 0, 0]
    numa_cpus = {n: f"{24 * n}-{24 * n + 23}" for n in range(8)}
    npus = [
        _npu(m, i, buses[i], numa_of[i], numa_cpus[numa_of[i]], "910B3", 65536, 20)
        for i in range(8)
    ]
    return {
        "about": "Atlas 800T A2: 8x Ascend 910B3 (64 GB HBM, 20 AI cores), HCCS full mesh "
        "(7 links per NPU, 1 per pair), 4x Kunpeng 920 48-core (no SMT); bus ids as npu-smi "
        "prints them on these servers; NPU-to-NUMA placement, memory, driver: pick",
        "source": "tests/data/machines/SOURCES.md#atlas-800t-a2",
        "npu": {
            "npu_smi_version": "24.1.rc2",
            "driver_version": "24.1.rc2",
            "dcmi_version": "24.1.rc2",
            "hccs_full_mesh": True,
        },
        "gpus": npus,
        "host": {
            "hostname": "atlas800t",
            "memtotal_kib": 1585152000,
            "sockets": 4,
            "cores_per_socket": 48,
            "threads_per_core": 1,
            "numa_cpus": {str(k): v for k, v in numa_cpus.items()},
            "core_id_gap_every": 0,
            "nvswitch": False,
        },
    }


def mixed_gpu_npu(nvidia_gpu) -> dict:
    """4x RTX 4090 + 4x Atlas 300T A2 (910B, PCIe cards, no HCCS between cards)."""
    m = "mixed-gpu-npu"
    numa_cpus = {0: "0-55,112-167", 1: "56-111,168-223"}
    gpus = []
    for i, bus in enumerate(["18", "2A", "9A", "AB"]):
        n = 0 if i < 2 else 1
        gpus.append(
            nvidia_gpu(
                m,
                i,
                minor=i,
                name="NVIDIA GeForce RTX 4090",
                memory_mib=24564,
                bus=f"00000000:{bus}:00.0",
                numa=n,
                affinity=numa_cpus[n],
                device_id="0x268410DE",
                mig_mode=None,
                nvlink="not_supported",
            )
        )
    for i, bus in enumerate(["3A", "5D", "BA", "DB"]):
        n = 0 if i < 2 else 1
        gpus.append(_npu(m, i, bus, n, numa_cpus[n], "910B4", 32768, 20))
    return {
        "about": "a composed mixed node (no vendor sells this exact box): 4x RTX 4090 and 4x "
        "Atlas 300T A2 class 910B4 PCIe cards (32 GB, no HCCS between cards) in a 2x56-core "
        "Xeon host; every part's facts as in the single-vendor machines; placement: pick",
        "source": "tests/data/machines/SOURCES.md#mixed",
        "driver_version": "550.90.07",
        "nvml_version": "12.550.90.07",
        "npu": {
            "npu_smi_version": "24.1.1",
            "driver_version": "24.1.1",
            "dcmi_version": "24.1.1",
            "hccs_full_mesh": False,
        },
        "gpus": gpus,
        "host": {
            "hostname": "mixed01",
            "memtotal_kib": 528278528,
            "sockets": 2,
            "cores_per_socket": 56,
            "threads_per_core": 2,
            "numa_cpus": {str(k): v for k, v in numa_cpus.items()},
            "core_id_gap_every": 0,
            "nvswitch": False,
        },
    }
