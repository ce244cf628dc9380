"""Which Slurm job a process belongs to, from `/proc/PID/cgroup` under the host root.

slurmd puts every task in a cgroup named after the job:
- cgroup v1 (`task/cgroup`): `4:devices:/slurm/uid_1000/job_42/step_0/task_0` (one line per
  controller; `/slurm_<node>/` when several slurmd share a host);
- cgroup v2: `0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`;
- Slurm 26.05 names the job's cgroup by its SLUID instead unless cgroup.conf says
  `CgroupJobIdPaths=yes`: `.../slurmstepd.scope/s1XXM8YJHNA100/step_0/...` (26.05's
  cgroup_v2.so builds `%s/%s` beside the old `/job_%u`; a SLUID is `s` and 13 Crockford
  base-32 characters, as 24.11+ print it: slurmctld's log, `scontrol show job --json`).
The job id is the allocation's raw id (an array task's own id), as sacct's JobIDRaw; a SLUID
is turned into it by `resolve_sluids` (Slurm's own job list), else kept as the key. The
owner is the `uid_N` of the v1 path, else the real uid in `/proc/PID/status`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

_JOB = re.compile(r"/job_(\d+)(?:/|$)")
_SLUID = re.compile(r"/(s[0-9A-HJKMNP-TV-Z]{13})(?:/|$)")
_UID = re.compile(r"/uid_(\d+)/")


@dataclass(frozen=True)
class JobOwner:
    """The Slurm job of a process and its owner (user name where the host knows it)."""

    job_id: str
    uid: int | None
    user: str


class ProcessMapper:
    """Maps PIDs to jobs; one instance per pass caches PIDs (a process on several GPUs is
    read once) and the host's user names."""

    def __init__(
        self,
        host_root: str | os.PathLike[str] = "/",
        resolve_sluids: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.root = Path(host_root)
        self._users: dict[int, str] | None = None
        self._jobs: dict[int, JobOwner | None] = {}
        # SLUID -> job id, asked once a pass and only when a SLUID-named cgroup is met
        self._resolve = resolve_sluids or (lambda: {})
        self._sluids: Mapping[str, str] | None = None
        self.unresolved: set[str] = set()  # SLUIDs kept as the key (Slurm did not know them)

    def job_of(self, pid: int) -> JobOwner | None:
        """The job of `pid`, or None (not a Slurm task, or it exited meanwhile)."""
        if pid not in self._jobs:
            self._jobs[pid] = self._read(pid)
        return self._jobs[pid]

    def _read(self, pid: int) -> JobOwner | None:
        proc = self.root / "proc" / str(pid)
        try:
            text = (proc / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            path = line.split(":", 2)[-1]
            m = _JOB.search(path)
            job_id = m.group(1) if m else None
            if job_id is None and (s := _SLUID.search(path)):
                job_id = self.job_of_sluid(s.group(1))
            if job_id is not None:
                uid_match = _UID.search(path)
                uid = int(uid_match.group(1)) if uid_match else self._status_uid(proc)
                return JobOwner(job_id, uid, self.user_name(uid))
        return None

    def job_of_sluid(self, sluid: str) -> str:
        """The job id Slurm gives `sluid`; the SLUID itself when Slurm does not know it."""
        if self._sluids is None:
            self._sluids = self._resolve()
        job_id = self._sluids.get(sluid)
        if job_id is None:
            self.unresolved.add(sluid)
            return sluid
        return job_id

    def _status_uid(self, proc: Path) -> int | None:
        try:
            for line in (proc / "status").read_text(encoding="utf-8").splitlines():
                if line.startswith("Uid:"):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return None

    def user_name(self, uid: int | None) -> str:
        """Name from the host's /etc/passwd (under the host root), else the uid as text."""
        if uid is None:
            return ""
        if self._users is None:
            self._users = {}
            try:
                for line in (self.root / "etc" / "passwd").read_text(encoding="utf-8").splitlines():
                    parts = line.split(":")
                    if len(parts) > 2 and parts[2].isdigit():
                        self._users.setdefault(int(parts[2]), parts[0])
            except OSError:
                pass
        return self._users.get(uid, str(uid))
