"""A real Prometheus server (Debian's `prometheus` package) on loopback, fed by backfilling.

`PrometheusServer(root, openmetrics_text).up()` turns the OpenMetrics text into TSDB blocks
with `promtool tsdb create-blocks-from openmetrics` in `root/data`, then starts `prometheus`
on a free 127.0.0.1 port with nothing to scrape, and waits until `/-/ready` answers. With
`basic_auth=(user, password)` the server requires HTTP basic auth (web config with a bcrypt
hash). `down()` stops the process it started, by pid. Missing programs raise (the
integration tests fail, never skip).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

PROGRAMS = ("prometheus", "promtool")
HINT = "install Debian's prometheus package (scripts/run-tests does)"


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash for Prometheus' web config (libcrypt through the `crypt` module)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

    # cost 4: the tests' password protects nothing, and every request pays the hash
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))


class PrometheusServer:
    """One Prometheus process with backfilled series, under `root`."""

    def __init__(
        self, root: Path, openmetrics: str, *, basic_auth: tuple[str, str] | None = None
    ) -> None:
        self.root = Path(root)
        self.openmetrics = openmetrics
        self.basic_auth = basic_auth
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = self.root / "prometheus.log"

    def auth_header(self) -> tuple[str, str]:
        assert self.basic_auth is not None
        token = base64.b64encode(":".join(self.basic_auth).encode()).decode()
        return ("Authorization", f"Basic {token}")

    def up(self, timeout: float = 60) -> PrometheusServer:
        missing = missing_programs()
        if missing:
            raise RuntimeError(f"missing {', '.join(missing)}: {HINT}")
        self.root.mkdir(parents=True, exist_ok=True)
        data = self.root / "data"
        source = self.root / "series.om"
        source.write_text(self.openmetrics, encoding="utf-8")
        filled = subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if filled.returncode != 0:
            raise RuntimeError(f"promtool backfill failed: {filled.stderr or filled.stdout}")
        config = self.root / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
        argv = [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=3650d",
            "--log.level=warn",
        ]
        if self.basic_auth:
            web = self.root / "web.yml"
            user, password = self.basic_auth
            web.write_text(f"basic_auth_users:\n  {user}: '{bcrypt_hash(password)}'\n")
            argv.append(f"--web.config.file={web}")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(f"{self.url}/-/ready")
        if self.basic_auth:
            request.add_header(*self.auth_header())
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.tail()}")
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(request, timeout=2) as answer,
            ):
                if answer.status == 200:
                    return
            if time.monotonic() > deadline:
                self.down()
                raise RuntimeError(f"prometheus not ready after {timeout:g} s: {self.tail()}")
            time.sleep(0.2)

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def down(self) -> None:
        """Stop the process this server started (by pid), SIGKILL after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> PrometheusServer:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
