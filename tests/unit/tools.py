"""Outside programs some unit tests run for real (Prometheus' promtool, systemd-analyze,
logrotate): `scripts/run-tests` installs their Debian packages. Missing, the test fails with
what to install; it is never skipped, so a run without them cannot look green."""

from __future__ import annotations

import shutil

import pytest

PACKAGE_OF = {"promtool": "prometheus", "systemd-analyze": "systemd", "logrotate": "logrotate"}


def need(program: str) -> str:
    """The program's path, or the test fails naming the Debian package to install."""
    path = shutil.which(program)
    if path is None:
        pytest.fail(
            f"{program} is not installed: apt-get install {PACKAGE_OF.get(program, program)} "
            "(sudo ./scripts/run-tests installs it)",
            pytrace=False,
        )
    return path
