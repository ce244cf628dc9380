"""Build a recorded host tree (/sys cpu+node topology, /proc, /dev markers) for a machine.

The tree is what `slurmgpu inventory --host-root DIR` reads: cpuN/topology files, NUMA
cpulists, /proc/meminfo, /proc/driver/nvidia-caps/mig-minors (the driver's full table for 32
GPUs, 135 minors each: 15 GPU instances x (1 access + 8 compute instances)), /etc/hostname
and /dev/nvidia* as plain marker files (inventory only records which exist).
"""

from __future__ import annotations

import json
from pathlib import Path

from slurmgpu.util.hostlist import format_id_list, parse_id_list

MAX_GPUS = 32
GI_PER_GPU = 15
CI_PER_GI = 8


def mig_minor_table() -> dict[str, int]:
    """The driver's mig-minors numbering: config 1, monitor 2, then 135 per GPU minor."""
    table = {"config": 1, "monitor": 2}
    minor = 3
    for gpu in range(MAX_GPUS):
        for gi in range(GI_PER_GPU):
            table[f"gpu{gpu}/gi{gi}/access"] = minor
            minor += 1
            for ci in range(CI_PER_GI):
                table[f"gpu{gpu}/gi{gi}/ci{ci}/access"] = minor
                minor += 1
    return table


def build_host_tree(machine: dict | str | Path, root: Path, *, drop_minors=()) -> Path:
    """Write the host tree of `machine` (dict or machine JSON path) under `root`."""
    if not isinstance(machine, dict):
        machine = json.loads(Path(machine).read_text(encoding="utf-8"))
    host = machine["host"]
    sockets, cores, threads = host["sockets"], host["cores_per_socket"], host["threads_per_core"]
    gap = host.get("core_id_gap_every", 0)
    per_thread = sockets * cores
    cpu_dir = root / "sys/devices/system/cpu"
    for t in range(threads):
        for pkg in range(sockets):
            for c in range(cores):
                cpu = t * per_thread + pkg * cores + c
                core_id = c + (c // gap if gap else 0)  # Intel-style gaps in core_id
                siblings = [s * per_thread + pkg * cores + c for s in range(threads)]
                topo = cpu_dir / f"cpu{cpu}" / "topology"
                topo.mkdir(parents=True, exist_ok=True)
                (topo / "physical_package_id").write_text(f"{pkg}\n")
                (topo / "core_id").write_text(f"{core_id}\n")
                (topo / "thread_siblings_list").write_text(format_id_list(siblings) + "\n")
    (cpu_dir / "online").write_text(f"0-{threads * per_thread - 1}\n")
    for node, cpus in host["numa_cpus"].items():
        d = root / f"sys/devices/system/node/node{node}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(format_id_list(parse_id_list(cpus)) + "\n")
    proc = root / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    kib = host["memtotal_kib"]
    (proc / "meminfo").write_text(f"MemTotal:       {kib} kB\nMemFree:        {kib // 2} kB\n")
    etc = root / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hostname").write_text(host["hostname"] + "\n")
    dev = root / "dev"
    (dev / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    nvidia = [g for g in machine["gpus"] if g.get("vendor", "nvidia") == "nvidia"]
    markers = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] if nvidia else []
    if host.get("nvswitch"):
        markers.append("nvidia-nvswitchctl")
    markers += [f"nvidia{g['minor_number']}" for g in nvidia]
    if any(g.get("vendor") == "amd" for g in machine["gpus"]):
        from tests.doubles.amdsmi import render_minors

        (dev / "dri").mkdir(parents=True, exist_ok=True)
        markers += ["kfd", *(f"dri/renderD{m}" for m in render_minors(machine))]
    npus = [g for g in machine["gpus"] if g.get("vendor") == "ascend"]
    if npus:
        markers += ["davinci_manager", "devmm_svm", "hisi_hdc"]
        markers += [f"davinci{g['phy_id']}" for g in npus]
    for name in markers:
        (dev / name).write_text("")
    mig_capable = any(g.get("mig_mode") is not None for g in nvidia)
    if mig_capable:
        table = mig_minor_table()
        caps = proc / "driver/nvidia-caps"
        caps.mkdir(parents=True, exist_ok=True)
        lines = [f"{k} {v}" for k, v in table.items() if k not in set(drop_minors)]
        (caps / "mig-minors").write_text("\n".join(lines) + "\n")
        # the driver creates cap device nodes for config/monitor and existing instances
        used = {1, 2}
        for g in nvidia:
            for mig in g.get("mig_devices", []):
                gi = f"gpu{g['minor_number']}/gi{mig['gi_id']}"
                used.add(table[f"{gi}/access"])
                used.add(table[f"{gi}/ci{mig['ci_id']}/access"])
        for minor in sorted(used):
            (dev / "nvidia-caps" / f"nvidia-cap{minor}").write_text("")
    return root
