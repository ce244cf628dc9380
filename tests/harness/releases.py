"""Which Slurm release a pytest session runs against, and which tests hold on which.

`SLURMGPU_TEST_SLURM=24.11` (what `scripts/run-tests --slurm 24.11` sets) makes the session
run every Slurm program from that release's cached Debian root (`debian_root.py`); unset, the
host's packages (Debian 12: 22.05) run, as before. Every integration test runs on every
release unless it is marked `@pytest.mark.slurm_only("22.05", reason=...)` ("host": the
host's own packages, whatever their release): such a test is
deselected (listed, with its reason, at the start of the run), never skipped. Where a
release behaves differently, a test asks the `slurm_series` fixture ((22, 5), (24, 11)) and
asserts that release's own expected behaviour (written down in docs/testing.md).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.harness.debian_root import RELEASES, RootError, SlurmRelease, release

ENV = "SLURMGPU_TEST_SLURM"


def session_release() -> SlurmRelease:
    """The release named by $SLURMGPU_TEST_SLURM (the host's when unset)."""
    return release(os.environ.get(ENV))


def _say(config: pytest.Config, line: str) -> None:
    """A line in the test log even while pytest captures output (inside a fixture)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capture = config.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        reporter.write_line(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


def deselect_other_releases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the tests marked `slurm_only(...)` for other releases; say which and why."""
    try:
        series = session_release().series
    except (RootError, OSError):
        return  # the session fixture fails every test with the message
    chosen = session_release()
    # "host": the host's own packages, whatever their release (a test that needs no Slurm)
    names = {series} | ({"host"} if chosen.suite is None else set())
    kept, dropped = [], []
    for item in items:
        mark = item.get_closest_marker("slurm_only")
        if mark is not None and not names & set(mark.args):
            dropped.append(item)
            why = mark.kwargs.get("reason", "no reason given")
            _say(config, f"not on Slurm {series}: {item.nodeid}: {why}")
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session", autouse=True)
def slurm_release(request: pytest.FixtureRequest) -> SlurmRelease:
    """Put the session's Slurm release on PATH (building its root if needed) and say which.

    A root that cannot be built fails the tests with debootstrap's message: nothing skips.
    """
    config = request.config
    try:
        chosen = session_release()
        version = chosen.activate(log=lambda line: _say(config, f"slurm root: {line}"))
    except (RootError, OSError, TimeoutError) as exc:
        pytest.fail(f"cannot run Slurm {os.environ.get(ENV)}: {exc}", pytrace=False)
    where = chosen.root()
    _say(
        config,
        f"Slurm under test: {version} "
        + (f"({where.label} root {where.path})" if where else "(the host's packages)"),
    )
    return chosen


@pytest.fixture(scope="session")
def slurm_series(slurm_release: SlurmRelease) -> tuple[int, int]:
    """(major, minor) of the Slurm under test, for tests whose expectation differs."""
    return slurm_release.version


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.harness.releases 24.11`: build/check the root, print `slurmctld -V`."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.releases",
        description="Build (or find cached) the Debian root that runs a Slurm release.",
    )
    parser.add_argument("series", help=f"one of {', '.join(sorted(RELEASES))}")
    args = parser.parse_args(argv)
    try:
        chosen = release(args.series)
        version = chosen.activate(environ={}, log=lambda line: print(line, flush=True))
    except (RootError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"releases: error: {exc}", file=sys.stderr)
        return 1
    where = chosen.root()
    print(
        f"Slurm {chosen.series}: {version}"
        + (f" ({where.label} root {where.path})" if where else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
