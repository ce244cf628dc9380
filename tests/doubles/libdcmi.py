"""A ctypes-level double of Huawei's libdcmi.so: a tiny C library built from a recorded machine.

`build(machine, out_dir)` writes C source whose tables are the machine's NPUs (tests/data/
machines/*.json, vendor "ascend") and compiles it with gcc into `libdcmi-double.so`; point
SLURMGPU_DCMI_LIBRARY at it. The functions have the signatures of `dcmi_interface_api.h` for
the calls slurmgpu makes; each card holds one device (device id 0), as on Atlas 800T A2.
Only the hardware is faked; nothing here knows about slurmgpu.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

_SOURCE = r"""
#include <string.h>
#include <stdio.h>
#define N %(n)d
struct chip { unsigned char t[32]; unsigned char n[32]; unsigned char v[32]; unsigned int ai; };
struct pcie { unsigned int ven, subven, dev, subdev; int domain; unsigned int bus, devid, fn;
              unsigned char reserve[32]; };
struct hbm { unsigned long long size; unsigned int freq; unsigned long long usage; int temp;
             unsigned int bw; };
struct die { unsigned int w[5]; };
static const char *names[N] = {%(names)s};
static const unsigned int bus[N] = {%(bus)s};
static const unsigned long long hbm_mb[N] = {%(hbm)s};
static const char *cpus[N] = {%(cpus)s};
static const unsigned int dies[N][5] = {%(dies)s};
static const int mesh = %(mesh)d;
static const int lost[N] = {%(lost)s};  /* an NPU that fails every query (-8008) */
static const unsigned long long hbm_used_mb[N] = {%(hbm_used)s};
static const int aicore[N] = {%(aicore)s};  /* AI Core rate in percent; -1: not supported */
static const unsigned int health[N] = {%(health)s};  /* dcmi health: 0 normal .. 3 critical */
static int ready = 0;
static int card_index(int card) { return (card >= 0 && card < N) ? card : -1; }
int dcmi_init(void) { ready = 1; return 0; }
int dcmi_get_card_num_list(int *num, int *list, int len) {
    if (!ready) return -8005;
    for (int i = 0; i < N && i < len; i++) list[i] = i;
    *num = N; return 0; }
int dcmi_get_device_num_in_card(int card, int *n) {
    if (card_index(card) < 0) return -8007; *n = 1; return 0; }
int dcmi_get_device_logic_id(int *logic, int card, int dev) {
    if (card_index(card) < 0 || dev != 0) return -8007; *logic = card; return 0; }
int dcmi_get_device_phyid_from_logicid(unsigned int logic, unsigned int *phy) {
    if (logic >= N) return -8007; *phy = logic; return 0; }
int dcmi_get_device_chip_info(int card, int dev, struct chip *c) {
    if (card_index(card) < 0 || dev != 0) return -8007;
    if (lost[card]) return -8008;
    memset(c, 0, sizeof *c); strcpy((char *)c->t, "Ascend");
    strcpy((char *)c->n, names[card]); strcpy((char *)c->v, "V1"); c->ai = 20; return 0; }
int dcmi_get_device_pcie_info_v2(int card, int dev, struct pcie *p) {
    if (card_index(card) < 0 || dev != 0) return -8007;
    memset(p, 0, sizeof *p); p->ven = 0x19e5; p->dev = 0xd802; p->bus = bus[card]; return 0; }
int dcmi_get_device_hbm_info(int card, int dev, struct hbm *h) {
    if (card_index(card) < 0 || dev != 0) return -8007;
    memset(h, 0, sizeof *h); h->size = hbm_mb[card]; h->usage = hbm_used_mb[card]; return 0; }
int dcmi_get_device_health(int card, int dev, unsigned int *h) {
    if (card_index(card) < 0 || dev != 0) return -8007;
    if (lost[card]) return -8008;
    *h = health[card]; return 0; }
int dcmi_get_device_utilization_rate(int card, int dev, int type, unsigned int *rate) {
    if (card_index(card) < 0 || dev != 0) return -8007;
    if (type != 2 || aicore[card] < 0) return -8255;  /* only AI Core is served here */
    *rate = (unsigned int)aicore[card]; return 0; }
int dcmi_get_affinity_cpu_info_by_device_id(int card, int dev, char *buf, int *len) {
    if (card_index(card) < 0 || dev != 0) return -8007;
    snprintf(buf, (size_t)*len, "%%s", cpus[card]); *len = (int)strlen(buf); return 0; }
int dcmi_get_device_die_v2(int card, int dev, int type, struct die *d) {
    if (card_index(card) < 0 || dev != 0 || type != 0) return -8007;
    memcpy(d->w, dies[card], sizeof d->w); return 0; }
int dcmi_get_topo_info_by_device_id(int c1, int d1, int c2, int d2, int *topo) {
    if (card_index(c1) < 0 || card_index(c2) < 0 || d1 || d2) return -8007;
    *topo = (c1 == c2) ? 0 : (mesh ? 3 : 1); return 0; }
int dcmi_get_dcmi_version(char *buf, int len) {
    snprintf(buf, (size_t)len, "%%s", "%(version)s"); return 0; }
"""


# the machine's `health` (npu-smi's Health column: "OK" in the recordings; the other names are
# this double's) -> dcmi_get_device_health's value (DCMI API reference: 0 normal, 1 minor
# alarm, 2 major alarm, 3 critical alarm)
_HEALTH = {"OK": 0, "Warning": 1, "Alarm": 2, "Critical": 3}


def build(machine: dict | str | Path, out_dir: Path) -> Path:
    """Compile the double for `machine`; return the .so path (needs gcc)."""
    if not isinstance(machine, dict):
        machine = json.loads(Path(machine).read_text(encoding="utf-8"))
    npus = [g for g in machine["gpus"] if g.get("vendor") == "ascend"]
    source = _SOURCE % {
        "n": len(npus),
        "names": ", ".join(f'"{n["chip"]}"' for n in npus),
        "bus": ", ".join(f"0x{n['bus_id'].split(':')[1]}" for n in npus),
        "hbm": ", ".join(f"{n['hbm_mib']}ULL" for n in npus),
        "cpus": ", ".join(f'"{n["cpu_affinity"]}"' for n in npus),
        "dies": ", ".join("{" + ", ".join(f"0x{w:08x}u" for w in n["die_id"]) + "}" for n in npus),
        "mesh": 1 if machine["npu"]["hccs_full_mesh"] else 0,
        "lost": ", ".join("1" if n.get("lost") else "0" for n in npus),
        # work on the NPUs (collector tests): HBM used (MB) and the AI Core rate
        "hbm_used": ", ".join(f"{n.get('hbm_used_mib', 3300)}ULL" for n in npus),
        "aicore": ", ".join(str(n.get("aicore_util_pct", 0)) for n in npus),
        "health": ", ".join(str(_HEALTH[n.get("health", "OK")]) for n in npus),
        "version": machine["npu"]["dcmi_version"],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    c_file, so_file = out_dir / "libdcmi-double.c", out_dir / "libdcmi-double.so"
    c_file.write_text(source, encoding="utf-8")
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("the libdcmi double needs gcc (Debian package gcc)")
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O0", "-o", str(so_file), str(c_file)],
        check=True,
        capture_output=True,
        text=True,
    )
    return so_file
