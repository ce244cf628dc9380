"""A real mail server for tests: Debian's exim4 (exim4-daemon-light) on a loopback port.

`MailServer().up()` writes its own exim configuration in a new directory under /tmp (spool,
log, one maildir that takes every recipient; not under pytest's tmp_path, which the exim
user cannot enter; removed by `down()`) and runs `exim4 -C CONF -bdf -odi` in the foreground
as the Debian-exim user (exim gives up root for a `-C` configuration anyway; as its own
user it needs none), listening on a free 127.0.0.1 port. `messages()` reads the maildir back
as `email.message.Message`s. `down()` stops the process group it started. The system's
exim service is never started (scripts/run-tests installs the package with policy-rc.d).
"""

from __future__ import annotations

import contextlib
import email
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from email.message import Message
from pathlib import Path

EXIM = "exim4"
EXIM_USER = "Debian-exim"
HINT = "install Debian's exim4-daemon-light package (scripts/run-tests does)"

CONFIG = """\
primary_hostname = slurmgpu-test.localdomain
qualify_domain = localdomain
spool_directory = {root}/spool
log_file_path = {root}/log/%slog
daemon_smtp_ports = {port}
local_interfaces = 127.0.0.1
domainlist local_domains = *
acl_smtp_rcpt = acl_check_rcpt
never_users =
exim_user = {user}
exim_group = {user}
host_lookup =
rfc1413_hosts =
sender_unqualified_hosts = *
recipient_unqualified_hosts = *
tls_advertise_hosts =
keep_environment =

begin acl
acl_check_rcpt:
  accept

begin routers
everything:
  driver = accept
  transport = to_maildir

begin transports
to_maildir:
  driver = appendfile
  directory = {root}/maildir
  maildir_format
  create_directory
  envelope_to_add
  return_path_add
  user = {user}
"""


def missing_programs() -> list[str]:
    missing = [] if shutil.which(EXIM) or Path("/usr/sbin/exim4").exists() else [EXIM]
    try:
        pwd.getpwnam(EXIM_USER)
    except KeyError:
        missing.append(f"user {EXIM_USER}")
    return missing


def host_runuser() -> str:
    """The host's runuser: with another Slurm release, PATH's `runuser` is that release's
    wrapper, which runs its command inside the release's root (where exim is not)."""
    for path in ("/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"):
        if os.access(path, os.X_OK):
            return path
    return "runuser"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MailServer:
    """One exim4 daemon delivering every message to `root/maildir`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="slurmgpu-mail-"))
        self.root.chmod(0o755)
        self.port = _free_port()
        self.smtp = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def up(self, timeout: float = 30) -> MailServer:
        missing = missing_programs()
        if missing:
            raise RuntimeError(f"missing {', '.join(missing)}: {HINT}")
        entry = pwd.getpwnam(EXIM_USER)
        for sub in ("", "spool", "log", "maildir"):
            path = self.root / sub
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        config = self.root / "exim.conf"
        config.write_text(CONFIG.format(root=self.root, port=self.port, user=EXIM_USER))
        os.chown(config, entry.pw_uid, entry.pw_gid)
        exim = shutil.which(EXIM) or "/usr/sbin/exim4"
        argv = [host_runuser(), "-u", EXIM_USER, "--", exim, "-C", str(config), "-bdf", "-odi"]
        with open(self.root / "exim.out", "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.down()
                raise RuntimeError(f"exim did not start: {log}")
            time.sleep(0.2)

    def log(self) -> str:
        texts = []
        for name in ("exim.out", "log/mainlog", "log/paniclog"):
            with contextlib.suppress(OSError):
                texts.append((self.root / name).read_text(errors="replace")[-2000:])
        return "\n".join(texts)

    def messages(self) -> list[Message]:
        """Every delivered message, oldest first."""
        new = self.root / "maildir" / "new"
        if not new.is_dir():
            return []
        files = sorted(new.iterdir(), key=lambda p: p.name)
        return [email.message_from_bytes(p.read_bytes()) for p in files]

    def down(self) -> None:
        """Stop the process group this server started (SIGTERM, then SIGKILL); remove its dir."""
        self._stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> MailServer:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
