"""Every test session runs its own munged, which no other process shares (issue 33 item 5).

Two sessions on one host (two checkouts, CI beside a developer, a system munged with its own
key) must not use nor stop each other's munged. Here a "host" is a mount namespace with its
own /run/munge where a foreign munged (another key) answers on the default socket, as the
machine's munged or another session's would; a second session is started in it, runs a job
on its own cluster and exits, and this session's cluster keeps working throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.harness import SlurmCluster
from tests.harness.cluster import (
    MUNGE_SOCKET,
    SESSION_MUNGE_MOUNT,
    Daemon,
    _clean_env,
    munge_answers,
    munged_argv,
    pid_alive,
    which,
    write_munge_key,
)
from tests.integration.conftest import require_slurm

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

# a whole test session in one process: its own cluster, one job, then it exits
SESSION = textwrap.dedent(
    """
    import json, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from tests.harness import SlurmCluster
    from tests.harness.cluster import which

    out = {}
    foreign_cred = open(sys.argv[2], "rb").read()
    with SlurmCluster() as cluster:
        out["munged_pid"] = cluster._daemons["munged"].pid
        job = cluster.sbatch()
        out["job_state"] = cluster.wait_job_state(job, "COMPLETED", timeout=90)
        rows = cluster.wait_sacct(job, lambda r: any(x["State"] == "COMPLETED" for x in r))
        out["sacct_states"] = sorted({row["State"] for row in rows})
        # the default socket, as every Slurm and munge program of this session uses it
        out["decodes_foreign"] = subprocess.run(
            [which("unmunge")], input=foreign_cred, capture_output=True
        ).returncode == 0
        out["own_cred"] = subprocess.run(
            [which("munge"), "-n"], capture_output=True, check=True
        ).stdout.decode()
    print("SESSION " + json.dumps(out))
    """
)


def _cred(socket: str) -> bytes:
    return subprocess.run(
        [which("munge") or "munge", "-n", f"--socket={socket}"],
        capture_output=True,
        check=True,
        timeout=10,
    ).stdout


def _decodes(cred: bytes, socket: str) -> bool:
    proc = subprocess.run(
        [which("unmunge") or "unmunge", f"--socket={socket}"],
        input=cred,
        capture_output=True,
        timeout=10,
        check=False,
    )
    return proc.returncode == 0


def _own_run_munge(pid: int) -> bool:
    """True once `pid` sees another file system on /run/munge than this session does (until
    its `unshare` and `mount` have run, /proc/PID/root/run/munge is still ours)."""
    try:
        return os.stat(f"/proc/{pid}/root/run/munge").st_dev != os.stat("/run/munge").st_dev
    except FileNotFoundError:
        return False


def test_the_sessions_munge_socket_is_private(slurm_cluster: SlurmCluster) -> None:
    # /run/munge is the session's own tmpfs, in a mount namespace the caller's shell is not in
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    ours = [m for m in mounts if m.split(" - ")[0].split()[4] == "/run/munge"]
    assert ours and ours[-1].split(" - ")[1].split()[:2] == ["tmpfs", SESSION_MUNGE_MOUNT], ours
    assert os.stat("/proc/self/ns/mnt").st_ino != os.stat(f"/proc/{os.getppid()}/ns/mnt").st_ino
    munged = slurm_cluster._daemons["munged"]
    assert munged.alive() and not slurm_cluster.munged_started  # the session's, not the cluster's
    assert "/run/munge/session/munge.key" in Path(f"/proc/{munged.pid}/cmdline").read_text()
    # as the shell that started pytest sees /run/munge: not our socket (absent or another one)
    outside = Path(f"/proc/{os.getppid()}/root{MUNGE_SOCKET}")
    inside = os.stat(MUNGE_SOCKET)
    assert not outside.exists() or os.stat(outside).st_ino != inside.st_ino


def test_a_foreign_munged_on_the_default_socket_is_never_used_nor_stopped(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    require_slurm()
    # the "host": a mount namespace whose /run/munge has a munged with a key of its own
    host = tmp_path / "host"
    (host / "pids").mkdir(parents=True)
    key = write_munge_key(host / "key" / "munge.key")
    argv = munged_argv(key, MUNGE_SOCKET, host, host)
    foreign = Daemon("munged", host, host / "munged.log", "munged")
    foreign.start(
        [
            which("unshare") or "unshare",
            "--mount",
            "--propagation=private",
            "/bin/sh",
            "-c",
            'mount -t tmpfs -o mode=0755 foreign-host /run/munge && exec "$@"',
            "host-munged",
            *argv,
        ],
        _clean_env({}),
        host,
        die_with_parent=True,
    )
    try:
        # the default socket as the "host" sees it (through the munged's own root)
        host_socket = f"/proc/{foreign.pid}/root{MUNGE_SOCKET}"
        deadline = time.monotonic() + 30
        while not (_own_run_munge(foreign.pid) and munge_answers(host_socket)):
            assert foreign.alive() and time.monotonic() < deadline, foreign.tail()
            time.sleep(0.2)
        foreign_cred = _cred(host_socket)
        (tmp_path / "foreign.cred").write_bytes(foreign_cred)
        # this session's munged does not know the host's key (nor the host ours)
        assert not _decodes(foreign_cred, MUNGE_SOCKET)
        assert not _decodes(_cred(MUNGE_SOCKET), host_socket)

        # a second session, started on that host: a cluster of its own runs a job, then exits
        script = tmp_path / "session.py"
        script.write_text(SESSION)
        nsenter = [which("nsenter") or "nsenter", f"--target={foreign.pid}", "--mount"]
        proc = subprocess.run(
            [*nsenter, sys.executable, str(script), str(REPO), str(tmp_path / "foreign.cred")],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=_clean_env({}),
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SESSION "))
        second = json.loads(line.removeprefix("SESSION "))
        assert second["job_state"] == "COMPLETED" and "COMPLETED" in second["sacct_states"]
        # it ran its own munged: not the host's (nor its key), nor ours ...
        assert second["decodes_foreign"] is False, "the second session used the host's munged"
        assert second["munged_pid"] not in (None, foreign.pid, slurm_cluster._daemons["munged"].pid)
        own = second["own_cred"].encode()
        assert not _decodes(own, host_socket) and not _decodes(own, MUNGE_SOCKET)
        # ... and stopped it when it ended, leaving the host's munged running with its key
        assert not pid_alive(second["munged_pid"])
        assert foreign.alive(), foreign.tail()
        assert munge_answers(host_socket) and _decodes(foreign_cred, host_socket)
    finally:
        foreign.stop()

    # this session's cluster was not disturbed by the other session's start nor its end
    job = slurm_cluster.sbatch()
    assert slurm_cluster.wait_job_state(job, "COMPLETED", timeout=90) == "COMPLETED"
    assert munge_answers()


def test_a_child_process_that_enters_gets_its_own_empty_run_munge(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # a process started by a test (a session within the session) does not share ours either
    child = textwrap.dedent(
        """
        import json, os, sys
        sys.path.insert(0, sys.argv[1])
        from tests.harness.cluster import MUNGE_DIR, enter_private_munge
        before = sorted(os.listdir(MUNGE_DIR))
        enter_private_munge()
        print(json.dumps([before, sorted(os.listdir(MUNGE_DIR))]))
        open(os.path.join(MUNGE_DIR, "child-was-here"), "w").close()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", child, str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    before, after = json.loads(proc.stdout)
    assert "munge.socket.2" in before  # it started in our namespace ...
    assert after == []  # ... and got an empty /run/munge of its own
    assert not Path("/run/munge/child-was-here").exists()
    assert munge_answers()
