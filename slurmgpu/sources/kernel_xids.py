"""Xids since the last run, from the kernel log, and DCGM's XID field when it is exported.

NVML only reports Xids that happen while its event set is registered, so a program run every
few minutes (HealthCheckProgram) misses past ones. The driver also logs every Xid to the
kernel log: `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the
bus.` (NVIDIA's Xid documentation). This module reads:

- `/dev/kmsg` (under `--host-root`): records `PRIO,SEQ,USEC,FLAGS;MESSAGE`, with a sequence
  number per boot, read without blocking to the end of the ring buffer;
- or a text log: `journalctl -k` / `dmesg` / `/var/log/kern.log` lines (any prefix before
  `NVRM: Xid`), read from the byte offset where the last run stopped;
- and DCGM: a Prometheus text exposition (dcgm-exporter's `/metrics`, or a file) with
  `DCGM_FI_DEV_XID_ERRORS{pci_bus_id=...}`, the *last* Xid of each GPU (0: none).

A state file (JSON) remembers the position (boot id + sequence for kmsg, inode + offset for
a text log, the last DCGM value per GPU) so each run reports only what is new, and the
critical Xids not yet cleared (a reboot, a new boot id, clears them; so does
`check --clear-xids`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from slurmgpu.model.fleet import XidEvent

XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:(?P<dom>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.(?P<fn>[0-7]))?\): (?P<xid>\d{1,5})(?:,\s*(?P<detail>.*))?$"
)
KMSG_RECORD = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
ISO_PREFIX = re.compile(r"^(?P<when>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^ ]*)\s")
BOOT_PREFIX = re.compile(r"^\[\s*(?P<when>\d+\.\d+)\]\s")
DCGM_XID = re.compile(r"^DCGM_FI_DEV_XID_ERRORS\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MAX_READ = 64 * 1024 * 1024  # never more of a text log per run than this
STATE_VERSION = 1


def parse_xid(message: str) -> tuple[str, int, str] | None:
    """`NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...` -> (NVML bus id, 79, detail) or None."""
    at = message.find("NVRM: Xid")
    if at < 0:
        return None
    m = XID_LINE.match(message[at:].rstrip())
    if not m:
        return None
    bus_id = (
        f"{int(m.group('dom'), 16):08X}:{int(m.group('bus'), 16):02X}:"
        f"{int(m.group('dev'), 16):02X}.{m.group('fn') or '0'}"
    )
    return bus_id, int(m.group("xid")), (m.group("detail") or "").strip()


def _line_time(line: str) -> str:
    m = ISO_PREFIX.match(line)
    if m:
        return m.group("when")
    m = BOOT_PREFIX.match(line)
    if m:
        return f"+{float(m.group('when')):.3f} s after boot"
    return ""


@dataclass
class XidState:
    """What the last run read (mutable while one run updates it; saved as JSON)."""

    boot_id: str = ""
    kmsg_seq: int = -1
    log_path: str = ""
    log_inode: int = 0
    log_offset: int = 0
    dcgm_last: dict[str, int] = field(default_factory=dict)
    pending: list[dict] = field(default_factory=list)  # critical Xids not cleared yet

    @classmethod
    def load(cls, path: Path) -> tuple[XidState, str | None]:
        """The saved state, or a fresh one and a warning when it is missing or unreadable."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(), None
        except (OSError, ValueError) as exc:
            return cls(), f"Xid state {path} unreadable ({exc}): starting afresh"
        try:
            if data.get("version") != STATE_VERSION:
                raise ValueError("unknown version")
            pending = [
                {
                    "pci_bus_id": str(p["pci_bus_id"]),
                    "xid": int(p["xid"]),
                    "detail": str(p.get("detail", "")),
                    "when": str(p.get("when", "")),
                    "source": str(p.get("source", "")),
                }
                for p in data.get("pending", [])
            ]
            return (
                cls(
                    boot_id=str(data.get("boot_id", "")),
                    kmsg_seq=int(data.get("kmsg_seq", -1)),
                    log_path=str(data.get("log_path", "")),
                    log_inode=int(data.get("log_inode", 0)),
                    log_offset=max(0, int(data.get("log_offset", 0))),
                    dcgm_last={str(k): int(v) for k, v in data.get("dcgm_last", {}).items()},
                    pending=pending,
                ),
                None,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            return cls(), f"Xid state {path} is not a slurmgpu Xid state ({exc}): starting afresh"

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "boot_id": self.boot_id,
                "kmsg_seq": self.kmsg_seq,
                "log_path": self.log_path,
                "log_inode": self.log_inode,
                "log_offset": self.log_offset,
                "dcgm_last": self.dcgm_last,
                "pending": self.pending,
            },
            indent=1,
            sort_keys=True,
        )


def _read_kmsg_records(path: Path) -> list[str]:
    """Every record text of /dev/kmsg (non-blocking reads, one record each, to EAGAIN), or
    the lines of a regular file holding recorded kmsg records."""
    st = path.stat()
    if not stat.S_ISCHR(st.st_mode):
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    records = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while len(records) < 1_000_000:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: go on
                    continue
                raise
            if not chunk:
                break
            records.append(chunk.decode("utf-8", errors="replace").rstrip("\n"))
    finally:
        os.close(fd)
    return records


def read_kmsg(path: Path, state: XidState, boot_id: str) -> list[XidEvent]:
    """Xids in kmsg records after the state's sequence number (all of them on a new boot)."""
    if boot_id != state.boot_id:
        state.boot_id, state.kmsg_seq = boot_id, -1
    events = []
    last = state.kmsg_seq
    for record in _read_kmsg_records(path):
        m = KMSG_RECORD.match(record)
        if not m:
            continue  # a continuation line (" KEY=value") or not a record
        seq = int(m.group("seq"))
        if seq <= state.kmsg_seq:
            continue
        last = max(last, seq)
        found = parse_xid(m.group("msg"))
        if found:
            when = f"+{int(m.group('usec')) / 1e6:.3f} s after boot"
            events.append(XidEvent(found[0], found[1], found[2], when, str(path)))
    state.kmsg_seq = last
    return events


def read_text_log(path: Path, state: XidState) -> list[XidEvent]:
    """Xids in a text log (journalctl -k, dmesg, kern.log) after the saved byte offset; a
    rotated (new inode) or shorter file is read from its start."""
    st = path.stat()
    offset = state.log_offset
    if state.log_path != str(path) or state.log_inode != st.st_ino or st.st_size < offset:
        offset = 0
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(MAX_READ)
    end = data.rfind(b"\n") + 1  # an unfinished last line is read next time
    events = []
    for raw in data[:end].splitlines():
        line = raw.decode("utf-8", errors="replace")
        found = parse_xid(line)
        if found:
            events.append(XidEvent(found[0], found[1], found[2], _line_time(line), str(path)))
    state.log_path, state.log_inode, state.log_offset = str(path), st.st_ino, offset + end
    return events


def parse_dcgm_metrics(text: str) -> dict[str, int]:
    """{NVML bus id: last Xid} from a Prometheus exposition with DCGM_FI_DEV_XID_ERRORS."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = DCGM_XID.match(line.strip())
        if not m:
            continue
        labels = dict(LABEL.findall(m.group("labels")))
        bus = labels.get("pci_bus_id") or labels.get("PCI_BUS_ID")
        try:
            value = int(float(m.group("value")))
        except ValueError:
            continue
        found = parse_xid(f"NVRM: Xid (PCI:{bus}): 0") if bus else None
        key = found[0] if found else (bus or f"gpu{labels.get('gpu', '?')}")
        out[key] = value
    return out


def dcgm_events(values: dict[str, int], state: XidState, source: str) -> list[XidEvent]:
    """A GPU whose last Xid differs from the saved one (and is not 0) has a new Xid."""
    events = [
        XidEvent(bus, xid, "DCGM_FI_DEV_XID_ERRORS (the last Xid)", "", source)
        for bus, xid in sorted(values.items())
        if xid and state.dcgm_last.get(bus) != xid
    ]
    state.dcgm_last = dict(values)
    return events


def kernel_log_path(host_root: str | os.PathLike[str]) -> Path | None:
    """Where this host's kernel log is: /dev/kmsg, else /var/log/kern.log (under host_root)."""
    root = Path(host_root)
    for rel in ("dev/kmsg", "var/log/kern.log"):
        if (root / rel).exists():
            return root / rel
    return None


def boot_id(host_root: str | os.PathLike[str]) -> str:
    try:
        return (Path(host_root) / "proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pending_events(state: XidState) -> list[XidEvent]:
    return [XidEvent(**p) for p in state.pending]


def remember_pending(state: XidState, events: Iterable[XidEvent], critical: frozenset[int]):
    """Keep the critical ones until cleared (a reboot or `--clear-xids`)."""
    seen = {(p["pci_bus_id"], p["xid"]) for p in state.pending}
    for e in events:
        if e.xid in critical and (e.pci_bus_id, e.xid) not in seen:
            state.pending.append(
                {
                    "pci_bus_id": e.pci_bus_id,
                    "xid": e.xid,
                    "detail": e.detail,
                    "when": e.when,
                    "source": e.source,
                }
            )
            seen.add((e.pci_bus_id, e.xid))


def read_dcgm(source: str, timeout_s: float = 5.0, max_bytes: int = 16 * 1024 * 1024) -> str:
    """dcgm-exporter's exposition from `http(s)://...` (whole-request deadline, size bound)
    or a file. Raises OSError / ValueError, which the caller turns into a warning."""
    if source.startswith(("http://", "https://")):
        import time
        import urllib.request

        deadline = time.monotonic() + timeout_s
        with urllib.request.urlopen(source, timeout=timeout_s) as resp:
            chunks, size = [], 0
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no complete answer within {timeout_s:g} s")
                chunk = resp.read1(65536)  # what has arrived: a trickle cannot outlast the deadline
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise ValueError(f"answer larger than {max_bytes // (1024 * 1024)} MiB")
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")
    with open(source, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes // (1024 * 1024)} MiB")
    return data.decode("utf-8", errors="replace")
