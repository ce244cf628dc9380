"""Which Slurm release a pytest session runs against, and which tests hold on which.

`SLURMGPU_TEST_SLURM=25.11` (what `scripts/run-tests --slurm 25.11` sets) makes the session
run every Slurm program from that release's cached root (`debian_root.py`); unset, the host's
packages (Debian 12: 22.05) run. Every integration test runs on every release unless a marker
leaves it out there: `@pytest.mark.slurm_not(SERIES..., fact=...)` (the Slurm fact that makes
it meaningless there) or `@pytest.mark.slurm_only("host" | "root" | SERIES, reason=...)`.
Such a test is deselected, never skipped: listed with its reason at collection and in the
terminal summary (`report_left_out`). Where a release behaves differently, a test asks the
`slurm_series` fixture ((22, 5), (24, 11), (25, 11)) and asserts that release's own expected
behaviour (docs/testing.md, whose module x release matrix `tests/harness/matrix.py` writes
from these same markers).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.harness.debian_root import (
    ENV,
    HOST_SERIES,
    RELEASES,
    RootError,
    SlurmRelease,
    release,
)


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


# marker arguments besides a release's series: "host" (the host's own packages, whatever their
# release: a test that needs no Slurm daemons runs once) and "root" (every release from a root)
SPECIAL = ("host", "root")


def known_series() -> set[str]:
    """Every series a marker may name: the host's (22.05 on Debian 12) and every root's."""
    return {HOST_SERIES, *RELEASES}


def why_left_out(item: pytest.Item, chosen: SlurmRelease) -> str | None:
    """Why `item` does not run on `chosen` (None: it runs), from its markers.

    `@pytest.mark.slurm_not("22.05", "24.11", fact=...)`: the Slurm fact that makes the test
    meaningless on those releases (e.g. topology.yaml is 25.05+).
    `@pytest.mark.slurm_only("host" | "root" | SERIES, reason=...)`: it holds only there.
    A marker naming an unknown release, or without its fact/reason, is a usage error (a typo
    must not drop a test quietly).
    """
    for mark in item.iter_markers("slurm_not"):
        _check_mark(item, mark, "fact", allowed=known_series())
        if chosen.series in mark.args:
            return mark.kwargs["fact"]
    only = item.get_closest_marker("slurm_only")
    if only is not None:
        _check_mark(item, only, "reason", allowed=known_series() | set(SPECIAL))
        names = {chosen.series, "root" if chosen.suite else "host"}
        if not names & set(only.args):
            return f"only on {', '.join(only.args)}: {only.kwargs['reason']}"
    return None


def _check_mark(item: pytest.Item, mark: pytest.Mark, why: str, allowed: set[str]) -> None:
    unknown = [a for a in mark.args if a not in allowed]
    if not mark.args or unknown or not mark.kwargs.get(why):
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.{mark.name} needs releases among "
            f"{', '.join(sorted(allowed))} (got {list(mark.args)}) and {why}=..."
        )


_LEFT_OUT = pytest.StashKey[list[tuple[str, str]]]()


def deselect_other_releases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the tests whose markers leave them out of this release; say which and why.

    Each is listed at collection and again in the terminal summary (`report_left_out`):
    nothing is left out silently.
    """
    try:
        chosen = session_release()
    except (RootError, OSError):
        return  # the session fixture fails every test with the message
    kept, dropped = [], []
    left_out = config.stash.setdefault(_LEFT_OUT, [])
    for item in items:
        why = why_left_out(item, chosen)
        if why is None:
            kept.append(item)
            continue
        dropped.append(item)
        left_out.append((item.nodeid, why))
        _say(config, f"not on Slurm {chosen.series}: {item.nodeid}: {why}")
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def report_left_out(terminalreporter, config: pytest.Config) -> None:
    """The terminal summary's section: every test this release's run left out, and why."""
    left_out = config.stash.get(_LEFT_OUT, [])
    if not left_out:
        return
    try:
        series = session_release().series
    except (RootError, OSError):
        series = "?"
    terminalreporter.section(f"left out on Slurm {series}: {len(left_out)} tests")
    by_reason: dict[str, list[str]] = {}
    for nodeid, why in left_out:
        by_reason.setdefault(why, []).append(nodeid)
    for why, nodeids in by_reason.items():
        terminalreporter.write_line(f"{len(nodeids)} left out: {why}")
        for nodeid in nodeids:
            terminalreporter.write_line(f"    {nodeid}")


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
