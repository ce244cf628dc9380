"""Xids since the last run from the kernel log (/dev/kmsg records, journalctl -k and dmesg
text) and DCGM's XID field, with the state file; recorded lines in tests/data/kernel/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurmgpu.fleet.check import CRITICAL_XIDS
from slurmgpu.fleet.xids import XidOptions, read_xids, xid_problems
from slurmgpu.model.fleet import ERROR, WARNING, GpuHealth
from slurmgpu.sources import kernel_xids as kx

DATA = Path(__file__).resolve().parents[2] / "data" / "kernel"
HEALTH = [
    GpuHealth(i, bus)
    for i, bus in enumerate(
        ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
         "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
    )
]  # fmt: skip


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off",
         ("00000000:9A:00.0", 79, "pid='<unknown>', name=<unknown>, GPU has fallen off")),
        ("2026-11-30T04:52:41+0000 gpu01 kernel: NVRM: Xid (PCI:0000:3a:00): 48, pid=1, x",
         ("00000000:3A:00.0", 48, "pid=1, x")),
        ("[1.5] NVRM: Xid (PCI:00000001:c4:00.1): 119", ("00000001:C4:00.1", 119, "")),
        ("NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus.", None),
        ("NVRM: Xid (PCI:zz:00): 79, x", None),
    ],
)  # fmt: skip
def test_parse_xid(line, expected):
    assert kx.parse_xid(line) == expected


def host(tmp_path: Path, kmsg: str = "kmsg.txt", boot: str = "boot-1") -> Path:
    root = tmp_path / "host"
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "dev" / "kmsg").write_text((DATA / kmsg).read_text())
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")
    return root


def test_kmsg_since_the_last_run(tmp_path):
    root = host(tmp_path)
    opts = XidOptions(host_root=str(root), save=True)
    first = read_xids(opts, CRITICAL_XIDS)
    assert [(e.pci_bus_id, e.xid) for e in first.new] == [
        ("00000000:18:00.0", 13),
        ("00000000:18:00.0", 43),
    ]
    assert first.new[0].when == "+5012.338 s after boot" and first.warnings == ()
    state = json.loads((root / "var/lib/slurmgpu/xid-state.json").read_text())
    assert (state["boot_id"], state["kmsg_seq"]) == ("boot-1", 1204)
    # the ring buffer grows: only the new records count
    with open(root / "dev" / "kmsg", "a") as fh:
        fh.write((DATA / "kmsg-more.txt").read_text())
    second = read_xids(opts, CRITICAL_XIDS)
    assert [(e.pci_bus_id, e.xid) for e in second.new] == [("00000000:9A:00.0", 79)]
    # a critical Xid is remembered on later runs (the log has nothing new)
    third = read_xids(opts, CRITICAL_XIDS)
    assert third.new == () and [(e.xid, e.pci_bus_id) for e in third.pending] == [
        (79, "00000000:9A:00.0")
    ]
    problems = xid_problems("gpu01", third, HEALTH, CRITICAL_XIDS)
    assert [(p.severity, p.message) for p in problems] == [
        (ERROR, "GPU 4 (00000000:9A:00.0) reported Xid 79 in the kernel log (+7200.451 s after "
                "boot, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.); still not "
                "cleared")
    ]  # fmt: skip
    assert "slurmgpu check --clear-xids" in problems[0].action
    # --clear-xids forgets it; a plain look (no save) moves nothing
    assert read_xids(XidOptions(host_root=str(root), clear=True), CRITICAL_XIDS).pending == ()
    assert read_xids(XidOptions(host_root=str(root)), CRITICAL_XIDS) == kx_empty()


def kx_empty():
    from slurmgpu.fleet.xids import XidRead

    return XidRead((), (), ())


def test_a_reboot_reads_the_new_boot_and_clears_what_was_remembered(tmp_path):
    root = host(tmp_path, "kmsg-more.txt")
    opts = XidOptions(host_root=str(root), save=True)
    assert read_xids(opts, CRITICAL_XIDS).new[0].xid == 79
    host(tmp_path, "kmsg.txt", boot="boot-2")  # new boot: sequence numbers start again
    after = read_xids(opts, CRITICAL_XIDS)
    assert [e.xid for e in after.new] == [13, 43] and after.pending == ()


def test_looking_without_save_never_moves_the_state(tmp_path):
    root = host(tmp_path)
    look = XidOptions(host_root=str(root))
    assert len(read_xids(look, CRITICAL_XIDS).new) == 2
    assert len(read_xids(look, CRITICAL_XIDS).new) == 2  # a person's `check --local`
    assert not (root / "var/lib/slurmgpu/xid-state.json").exists()


def test_text_logs_from_their_offset(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text((DATA / "journalctl-k.txt").read_text())
    opts = XidOptions(host_root=str(tmp_path), kernel_log=str(log), save=True)
    first = read_xids(opts, CRITICAL_XIDS)
    assert [(e.pci_bus_id, e.xid, e.when) for e in first.new] == [
        ("00000000:3A:00.0", 48, "2026-11-30T04:52:41+0000"),
        ("00000000:3A:00.0", 63, "2026-11-30T04:52:41+0000"),
        ("00000000:5D:00.0", 31, "2026-11-30T05:10:00+0000"),
    ]
    # a line being written is read once it is whole
    with open(log, "a") as fh:
        fh.write("[7.0] NVRM: Xid (PCI:0000:ba:00): 94, pid=1")
    assert read_xids(opts, CRITICAL_XIDS).new == ()
    with open(log, "a") as fh:
        fh.write(", name=x\n")
    assert [e.xid for e in read_xids(opts, CRITICAL_XIDS).new] == [94]
    # rotated (a new file): read from its start
    log.unlink()
    log.write_text((DATA / "dmesg.txt").read_text())
    rotated = read_xids(opts, CRITICAL_XIDS)
    assert [(e.xid, e.when) for e in rotated.new] == [
        (94, "+12345.679 s after boot"),
        (13, "+12399.000 s after boot"),
    ]
    problems = xid_problems("gpu01", rotated, HEALTH, CRITICAL_XIDS)
    kinds = [(p.severity, p.message.split(" in ")[0]) for p in problems]
    assert kinds == [
        (ERROR, "GPU 6 (00000000:BA:00.0) reported Xid 94"),
        (WARNING, "GPU 6 (00000000:BA:00.0) reported Xid 13"),
        # the earlier critical ones are still remembered
        (ERROR, "GPU 2 (00000000:3A:00.0) reported Xid 48"),
        (ERROR, "GPU 2 (00000000:3A:00.0) reported Xid 63"),
    ]


def test_dcgm_xid_field(tmp_path):
    metrics = DATA / "dcgm-metrics.txt"
    assert kx.parse_dcgm_metrics(metrics.read_text()) == {
        "00000000:18:00.0": 0,
        "00000000:9A:00.0": 74,
    }
    opts = XidOptions(host_root=str(tmp_path), kernel_log=os.devnull, dcgm=str(metrics), save=True)
    first = read_xids(opts, CRITICAL_XIDS)
    assert [(e.pci_bus_id, e.xid) for e in first.new] == [("00000000:9A:00.0", 74)]
    problems = xid_problems("gpu01", first, HEALTH, CRITICAL_XIDS)
    assert problems[0].message == "GPU 4 (00000000:9A:00.0) reported Xid 74 in DCGM"
    assert read_xids(opts, CRITICAL_XIDS).new == ()  # the same last value: nothing new


def test_sources_that_fail_are_warnings(tmp_path):
    bad_state = tmp_path / "state.json"
    bad_state.write_text("[1, 2]")
    opts = XidOptions(
        host_root=str(tmp_path / "nowhere"),
        dcgm="http://127.0.0.1:9/metrics",
        state_path=str(bad_state),
    )
    read = read_xids(opts, CRITICAL_XIDS)
    assert read.new == () and len(read.warnings) == 3
    assert "is not a slurmgpu Xid state" in read.warnings[0]
    assert "no kernel log under" in read.warnings[1]
    assert read.warnings[2].startswith("DCGM http://127.0.0.1:9/metrics: ")
    problems = xid_problems("gpu01", read, HEALTH, CRITICAL_XIDS)
    assert {(p.kind, p.severity) for p in problems} == {("xid-source", WARNING)}


def test_nvml_and_the_log_report_one_xid_once():
    read = kx_empty().__class__((kx.XidEvent("00000000:18:00.0", 48, "pid=1", "", "log"),), (), ())
    health = [GpuHealth(0, "00000000:18:00.0", xids=(48,))]
    assert xid_problems("n", read, health, CRITICAL_XIDS) == []
    unknown = xid_problems("n", read, [], CRITICAL_XIDS)
    assert unknown[0].message.startswith("the GPU at 00000000:18:00.0 reported Xid 48")


def test_dcgm_over_http_and_a_server_that_trickles(tmp_path, capfd):
    """dcgm-exporter's /metrics over real HTTP; a server sending a byte every 0.2 s is cut at
    the whole-request deadline (a warning), never a hang."""
    import http.server
    import threading
    import time

    body = (DATA / "dcgm-metrics.txt").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            if self.path == "/slow":
                try:
                    for byte in body[:200]:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(0.2)
                except ConnectionError:
                    return  # the client gave up at its deadline: the trickle ends here
            else:
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    # handler threads joined at server_close(): none outlives the test (a trickle left
    # running printed its broken pipe into a later test's captured output)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert kx.parse_dcgm_metrics(kx.read_dcgm(url + "/metrics"))["00000000:9A:00.0"] == 74
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="no complete answer within 1 s"):
            kx.read_dcgm(url + "/slow", timeout_s=1.0)
        assert time.monotonic() - started < 3
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err
