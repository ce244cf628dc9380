"""Where Slurm releases differ, each release's own behaviour, seen on real daemons.

Runs in every session: on the host's 22.05 (`scripts/run-tests`) and on 24.11 from the
Debian 13 root (`scripts/run-tests --slurm 24.11`). Each test asserts what the release under
test does (`slurm_series`); docs/testing.md has the same table in words.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.render import gres
from slurmgpu.sources import snapshot
from tests.harness import ClusterError, SlurmCluster

EXAMPLES = Path(__file__).resolve().parents[2] / "etc" / "examples"


def _series_text(series: tuple[int, int]) -> str:
    return "{}.{:02d}.".format(*series)


@pytest.fixture(scope="module")
def cluster(slurm_cluster: SlurmCluster):
    """The session cluster, back to the harness default after this module."""
    try:
        yield slurm_cluster
    finally:
        slurm_cluster.reset()


def test_the_chosen_release_runs(cluster: SlurmCluster, slurm_series) -> None:
    # every part of the cluster is the release under test: client, controller, node daemon
    prefix = _series_text(slurm_series)
    client = cluster.run(["sinfo", "--version"]).stdout
    assert re.search(rf"slurm(-wlm)? {re.escape(prefix)}\d+", client), client
    config = cluster.scontrol("show", "config")
    assert re.search(rf"^SLURM_VERSION\s*=\s*{re.escape(prefix)}\d+$", config, re.M), config
    assert cluster.node_state()["Version"].startswith(prefix), cluster.node_state()


def test_gen_gres_targets_the_installed_slurm(slurm_series, tmp_path) -> None:
    # no --slurm-version: gen-gres asks the Slurm on PATH, and 24.05.5+ widens Cores= to
    # whole sockets (the DGX A100's GPU 0 sits on NUMA cores 48-63 of socket 0, cores 0-63);
    # --check runs that release's `slurmd -G` before writing
    target = tmp_path / "gres.conf"
    result = CliRunner().invoke(
        main,
        [
            "gen-gres",
            "--snapshot",
            str(EXAMPLES / "dgx-a100-mig.json"),
            "--check",
            "--output",
            str(target),
        ],
    )
    assert result.exit_code == 3, result.output  # 3: written (docs/acting.md, exit codes)
    assert "slurmd -G parsed 17 GRES records, each as generated" in result.stderr, result.stderr
    text = target.read_text()
    assert f"# Target Slurm {_series_text(slurm_series)}" in text, text[:600]
    first = next(ln for ln in text.splitlines() if ln.startswith("Name=gpu"))
    if slurm_series >= (24, 5):
        assert "Cores=0-63 " in first and "Cores=48-63" not in text
    else:
        assert "Cores=48-63 " in first


@pytest.mark.parametrize(("example", "records"), [("dgx-h100", 8), ("dgx-a100-mig", 17)])
def test_generated_files_are_accepted_record_by_record(example, records, tmp_path) -> None:
    """gen-gres for the installed release, then that release's `slurmd -G`: every record it
    prints is the one generated (File, Type, Count, Cores, Links, Flags), none missing."""
    target = tmp_path / "gres.conf"
    result = CliRunner().invoke(
        main,
        ["gen-gres", "--snapshot", str(EXAMPLES / f"{example}.json"), "--check",
         "--output", str(target)],
    )  # fmt: skip
    assert result.exit_code == 3, result.output  # 3: written (docs/acting.md)
    assert f"slurmd -G parsed {records} GRES records, each as generated" in result.stderr, (
        result.stderr
    )


def _dgx_a100(version: tuple[int, int, int]) -> tuple[str, str]:
    inv = snapshot.load(EXAMPLES / "dgx-a100-mig.json")
    opts = gres.GresOptions(node_name="gpu01", node_hostname="localhost", slurm_version=version)
    text = gres.render_gres_conf(inv, opts, inventory_sha256=snapshot.inventory_sha256(inv))
    return gres.node_line(inv, opts), text


def test_the_22_05_cores_form(cluster: SlurmCluster, slurm_series) -> None:
    # gen-gres for 22.05 keeps each GPU's NUMA cores (Cores=48-63 on a 64-core socket)
    node_line, text = _dgx_a100((22, 5, 0))
    assert "Cores=48-63 " in text
    if slurm_series < (24, 5):
        cluster.reconfigure(node_line=node_line, gres_conf=text, extra_conf="GresTypes=gpu")
        jobid = cluster.sbatch("--gres=gpu:1g.5gb:1")
        assert cluster.wait_job_state(jobid, "COMPLETED", timeout=90) == "COMPLETED"
        return
    # 24.11 (since 24.05.5): slurmd -G accepts the file, but slurmctld drains the node at
    # registration, so gen-gres must widen Cores= for it (test_gen_gres does, and runs jobs)
    with pytest.raises(ClusterError) as info:
        cluster.reconfigure(
            node_line=node_line, gres_conf=text, extra_conf="GresTypes=gpu", timeout=60
        )
    message = str(info.value)
    assert "INVALID_REG" in message or "DRAIN" in message, message
    assert "core specification 48-63 for node gpu01 doesn't match socket boundaries" in message
    assert cluster.validate_gres(text, node_line).ok  # the parser alone does not catch it


def test_gpu_usage_tres_are_accepted(cluster: SlurmCluster, slurm_series) -> None:
    # what `slurmgpu analyze` reads GPU utilization from: gres/gpuutil and gres/gpumem
    tres = "AccountingStorageTRES=gres/gpu,gres/shard,gres/gpumem,gres/gpuutil"
    cluster.reconfigure(extra_conf=tres)
    shown = cluster.scontrol("show", "config")
    assert re.search(r"^AccountingStorageTRES\s*=.*gres/gpuutil", shown, re.M), shown
    known = cluster.sacctmgr("-n", "-P", "show", "tres", "format=Type,Name").split()
    assert {"gres|gpumem", "gres|gpuutil"} <= set(known), known
    jobid = cluster.sbatch("--gres=gpu:1")
    assert cluster.wait_job_state(jobid, "COMPLETED", timeout=60) == "COMPLETED"
    rows = cluster.wait_sacct(jobid, lambda r: any(x["End"] != "Unknown" for x in r))
    assert "gres/gpu=1" in rows[0]["AllocTRES"].split(","), rows[0]


FABRIC = textwrap.dedent(
    """\
    [[nvlink_domain]]
    name = "nvl1"
    nodes = "gpu01"
    """
)


def test_topology_block(cluster: SlurmCluster, slurm_series, tmp_path) -> None:
    fabric = tmp_path / "fabric.toml"
    fabric.write_text(FABRIC)
    argv = ["gen-topology", "--switches", str(fabric), "--nodes", "gpu01", "--plugin", "block"]
    made = CliRunner().invoke(main, [*argv, "--output-dir", str(cluster.conf_dir)])
    if slurm_series < (23, 11):
        # gen-topology asks the installed Slurm (22.05): no topology/block there, and the
        # release's own slurmctld agrees (it has no such plugin)
        assert made.exit_code == 1 and "topology/block needs Slurm >= 23.11" in made.output
        made = CliRunner().invoke(main, [*argv, "--slurm-version", "23.11"])
        (cluster.conf_dir / "topology.conf").write_text(made.stdout)
        with pytest.raises(ClusterError) as info:
            cluster.reconfigure(extra_conf="TopologyPlugin=topology/block", timeout=60)
        assert str(info.value).startswith("slurmctld "), str(info.value)
        assert "topology/block" in str(info.value)
        (cluster.conf_dir / "topology.conf").unlink()
        cluster.reset()
        return
    assert made.exit_code == 3, made.output  # 3: written (docs/acting.md, exit codes)
    try:
        cluster.reconfigure(extra_conf="TopologyPlugin=topology/block")
        shown = cluster.scontrol("show", "topology")
        assert re.search(r"BlockName=nvl1\b.*\bNodes=gpu01\b", shown), shown
        jobid = cluster.sbatch("--gres=gpu:1")
        assert cluster.wait_job_state(jobid, "COMPLETED", timeout=60) == "COMPLETED"
    finally:
        # 25.05+: gen-topology --output-dir wrote topology.yaml too, which slurmctld reads
        # before topology.conf: a stale one would hide the next test's tree
        for name in ("topology.conf", "topology.yaml"):
            (cluster.conf_dir / name).unlink(missing_ok=True)
        cluster.reset()


def test_job_submit_lua_plugin_is_built_with_lua_5_1(slurm_release) -> None:
    # the product checks job_submit.lua with luac5.1 and a Lua 5.1 runtime: that must be the
    # Lua the release's job_submit/lua plugin links (22.05 on Debian 12, 24.11 on Debian 13)
    root = slurm_release.root()
    base = root.path if root is not None else Path("/")
    plugins = sorted(base.glob("usr/lib/*/slurm-wlm/job_submit_lua.so"))
    assert plugins, f"no job_submit_lua.so under {base}/usr/lib"
    needed = plugins[0].read_bytes()
    assert b"liblua5.1.so.0" in needed
    assert b"liblua5.4.so" not in needed and b"liblua5.3.so" not in needed


# ---------------------------------------------------------------- the Debian root itself

ROOT_ONLY = pytest.mark.slurm_only("root", reason="checks the root the release runs from")


@ROOT_ONLY
def test_daemons_run_inside_the_root_and_leave_no_mounts(cluster: SlurmCluster) -> None:
    root = cluster.slurm.root()
    assert root is not None
    for name in ("slurmctld", "slurmd", "slurmdbd", "munged"):
        pid = cluster._daemons[name].pid  # munged: the session's own (tests/harness/cluster.py)
        # the pid the harness holds is the daemon's own (every wrapper step execs) ...
        assert name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(), name
        # ... and it runs chrooted into the cached root, not from the host's packages
        assert Path(f"/proc/{pid}/root").resolve() == root.path.resolve(), name
    # the binds live in the daemons' private mount namespaces: none shows on the host
    from tests.harness.debian_root import mounts_under

    assert mounts_under(root.path) == []


@ROOT_ONLY
def test_a_root_that_cannot_be_built_fails_with_debootstraps_words(tmp_path) -> None:
    from tests.harness.debian_root import DebianRoot, RootError

    # nothing listens on port 9: debootstrap cannot fetch the suite's Release file
    broken = DebianRoot(
        "trixie", ("slurmd",), cache_dir=tmp_path / "cache", mirror="http://127.0.0.1:9/debian"
    )
    with pytest.raises(RootError) as info:
        broken.ensure("24.11", log=lambda line: None)
    message = str(info.value)
    assert message.startswith("debootstrap of Debian trixie from http://127.0.0.1:9/debian exited")
    assert str(broken.build_log) in message
    assert not broken.built() and not broken.path.exists()
