#!/usr/bin/env bash
# On a real GPU node: record an inventory with slurmgpu, generate gres.conf, and compare its
# NVLink counts and CPU affinity with `nvidia-smi topo -m`. Prints a short report; exits 1 on
# a mismatch. Needs the NVIDIA driver, nvidia-smi and nvidia-ml-py; slurmd only for --check.
#   scripts/device-check.sh [OUTDIR]      (default OUTDIR: ./device-check-out)
set -euo pipefail
out=${1:-device-check-out}
py=${PYTHON:-python3}
mkdir -p "$out"
nvidia-smi -L | tee "$out/nvidia-smi-L.txt"
nvidia-smi topo -m | tee "$out/topo-m.txt"
$py -m slurmgpu inventory --output "$out/inventory.json"
$py -m slurmgpu gen-gres --snapshot "$out/inventory.json" --node-line --output - \
  > "$out/gres-and-node.conf"
if command -v slurmd >/dev/null; then
  $py -m slurmgpu gen-gres --snapshot "$out/inventory.json" --check --output "$out/gres.conf" || true
fi
$py - "$out" <<'PY'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
inv = json.loads((out / "inventory.json").read_text())
topo = (out / "topo-m.txt").read_text().splitlines()
header = topo[0].split()
gpu_cols = [i for i, h in enumerate(header) if re.fullmatch(r"GPU\d+", h)]
rows = {l.split()[0]: l.split()[1:] for l in topo[1:] if re.match(r"^GPU\d+\s", l)}
aff_col = next((i for i, h in enumerate(header) if h == "CPU"), None)
bad = 0
gpus = {g["index"]: g for g in inv["gpus"]}
for name, cells in rows.items():
    i = int(name[3:])
    g = gpus.get(i)
    if g is None:
        print(f"{name}: not in the inventory"); bad += 1; continue
    active = sum(1 for l in g["nvlinks"] if l["active"])
    for j, col in enumerate(gpu_cols):
        cell = cells[col] if col < len(cells) else ""
        m = re.fullmatch(r"NV(\d+)", cell)
        if m and int(m.group(1)) != active:
            print(f"{name}->GPU{j}: topo says {cell}, inventory has {active} active links"); bad += 1
    if aff_col is not None and aff_col < len(cells) and cells[aff_col] != g["cpu_affinity"]:
        print(f"{name}: CPU affinity topo {cells[aff_col]} vs inventory {g['cpu_affinity']}"); bad += 1
print(f"checked {len(rows)} GPUs: {'OK' if not bad else str(bad) + ' mismatch(es)'}")
sys.exit(1 if bad else 0)
PY
