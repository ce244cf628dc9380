"""The one way slurmgpu runs other programs: an argument list, a timeout, no shell."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from slurmgpu.errors import SlurmCommandError


def run(
    argv: Sequence[str],
    *,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    check: bool = True,
    errors: str = "strict",
) -> subprocess.CompletedProcess[str]:
    """Run `argv` and return the completed process (text mode).

    Raises `SlurmCommandError` naming the program when it is missing, times out, or (with
    `check`) exits non-zero; the message carries the tail of its stderr. `errors` is how
    undecodable output bytes are handled ("surrogateescape" keeps them recoverable).
    """
    argv = [str(a) for a in argv]
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors=errors,
            timeout=timeout,
            env=full_env,
            input=input_text,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SlurmCommandError(f"{argv[0]}: command not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmCommandError(f"{argv[0]}: no answer after {timeout:g} s") from exc
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        detail = "; ".join(tail) if tail else "no output"
        raise SlurmCommandError(f"{' '.join(argv[:3])} exited {proc.returncode}: {detail}")
    return proc
