#!/usr/bin/env bash
# On a real GPU node: check `slurmgpu collect`'s NVML pass against nvidia-smi while a process
# holds 1 GiB of GPU memory (CUDA driver API through ctypes, no CUDA toolkit needed). Compares
# the process list and memory per process, the utilization NVML gives (or, on MIG, says it does
# not), and checks the textfile with promtool when present. Exits 1 on a mismatch.
#   scripts/device-check-collect.sh [OUTDIR]      (default OUTDIR: ./device-check-collect-out)
# NOT YET RUN on a GPU: written for the next task that is lent one (docs/measuring.md).
set -euo pipefail
out=${1:-device-check-collect-out}
py=${PYTHON:-python3}
mkdir -p "$out"
$py - "$out/holder.pid" <<'PY' &
import ctypes, os, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit"
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0, "cuDeviceGet"
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0, "cuCtxCreate"
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 30) == 0, "cuMemAlloc"
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(30)
PY
holder=$!
for _ in $(seq 50); do [[ -s "$out/holder.pid" ]] && break; sleep 0.2; done
sleep 2
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
  | tee "$out/nvidia-smi-apps.csv"
$py -m slurmgpu collect --state "$out/state.json" --textfile "$out/collect.prom" --node device \
  | tee "$out/collect.txt"
rc=0
$py - "$out" <<'PY' || rc=$?
import sys
from pathlib import Path
from slurmgpu.measure.collector.nvml import sample_node
out = Path(sys.argv[1])
pid = int((out / "holder.pid").read_text())
smi = {int(p): float(m) for p, m in (l.split(",") for l in (out / "nvidia-smi-apps.csv").read_text().splitlines() if l.strip())}
sample = sample_node()
bad = list(sample.errors)
seen = {p.pid: p.used_mib for d in sample.devices for p in d.processes}
if pid not in seen:
    bad.append(f"holder pid {pid} not in NVML's process list {sorted(seen)}")
elif seen[pid] is not None and abs(seen[pid] - smi.get(pid, -1)) > 2:
    bad.append(f"pid {pid}: NVML {seen[pid]} MiB, nvidia-smi {smi.get(pid)} MiB")
for d in sample.devices:
    print(f"device {d.key} {d.profile or ''} mem {d.mem_used_mib:.0f}/{d.mem_total_mib:.0f} MiB util {d.util_pct}")
print("MISMATCH:\n  " + "\n  ".join(bad) if bad else "collect matches nvidia-smi")
sys.exit(1 if bad else 0)
PY
if command -v promtool >/dev/null; then promtool check metrics < "$out/collect.prom"; fi
kill "$holder" 2>/dev/null || true
exit $rc
