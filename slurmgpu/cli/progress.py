"""A progress line on stderr for long accounting loads, only when stderr is a terminal.

Under cron or systemd stderr is not a TTY and nothing is drawn. The line appears only
after `delay_s`, so short loads stay silent. For saved dumps the fraction comes from the
read position of the open file (Linux `/proc/self/fdinfo`), which needs no hook in the
loader; for a live `sacct` query (or elsewhere) it shows the elapsed time only.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO


def _read_positions(paths: set[str]) -> dict[str, int]:
    """Byte offset of each of `paths` this process has open (Linux /proc), by path."""
    positions: dict[str, int] = {}
    fd_dir = Path("/proc/self/fd")
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return positions
    for fd in fds:
        try:
            target = os.readlink(fd)
            if target not in paths:
                continue
            for line in (Path("/proc/self/fdinfo") / fd.name).read_text().splitlines():
                if line.startswith("pos:"):
                    positions[target] = max(positions.get(target, 0), int(line.split()[1]))
        except (OSError, ValueError):
            continue
    return positions


class LoadProgress:
    """Context manager drawing `label: 42% (120/290 MiB) 12s` while the body runs."""

    def __init__(
        self,
        label: str,
        files: Sequence[str | os.PathLike[str]] = (),
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        delay_s: float = 1.0,
        interval_s: float = 0.25,
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.delay_s, self.interval_s = delay_s, interval_s
        self.files = [os.path.realpath(f) for f in files]
        self.sizes: dict[str, int] = {}
        for f in self.files:
            try:
                self.sizes[f] = os.stat(f).st_size
            except OSError:
                self.sizes[f] = 0
        self.drawn = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def fraction(self) -> float | None:
        """Share of the input bytes read so far, or None when it cannot be known.

        The loader reads the files one after the other, from its first second on (the line
        is drawn only after `delay_s`): files before the one open now are done, and with no
        file open at all everything has been read and the analysis is running.
        """
        total = sum(self.sizes.values())
        if not total:
            return None
        now = _read_positions(set(self.files))
        if not now:
            return 1.0
        first_open = min(self.files.index(f) for f in now)
        read = sum(self.sizes[f] for f in self.files[:first_open])
        read += sum(min(pos, self.sizes[f]) for f, pos in now.items())
        return min(1.0, read / total)

    def line(self, elapsed_s: float) -> str:
        frac = self.fraction()
        if frac is None:
            return f"{self.label}: {elapsed_s:.0f}s"
        total_mib = sum(self.sizes.values()) / 2**20
        if frac >= 1.0:  # everything read: the metrics are being computed
            return f"{self.label}: read {total_mib:,.0f} MiB, analyzing {elapsed_s:.0f}s"
        return (
            f"{self.label}: {frac * 100:3.0f}% ({frac * total_mib:,.0f}/{total_mib:,.0f} MiB) "
            f"{elapsed_s:.0f}s"
        )

    def _run(self) -> None:
        start = time.monotonic()
        if self._stop.wait(self.delay_s):
            return
        while not self._stop.is_set():
            self.stream.write("\r\x1b[K" + self.line(time.monotonic() - start))
            self.stream.flush()
            self.drawn = True
            self._stop.wait(self.interval_s)

    def __enter__(self) -> LoadProgress:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="slurmgpu-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
