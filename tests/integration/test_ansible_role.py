"""Issue 36 (part 3), issue 33's config-management line: the Ansible role in ansible/roles/slurmgpu,
run by ansible-core's own `ansible-playbook` (the `test` extra) over the example play
ansible/site.yml with a local connection, against the session's real test cluster.

One host is both the controller and a GPU node; the files go under a temporary prefix (the
cluster's own configuration is not touched), the QOS into the cluster's slurmdbd, and the node's
inventory is an example snapshot instead of NVML. The role runs the slurmgpu of this test
environment: its install step finds slurmgpu[analysis] installed in this venv (nothing is
downloaded; the step reports ok).

- The first run converges: every render step changed, the QOS are in slurmdbd, gres.conf and
  the node block pass Slurm's parser (slurmd -G), slurmctld loads the job_submit.lua and the
  topology.conf, which routes a job to the policy's default tier; the reconfigure handler ran.
- The second run reports changed=0 and runs no handler.
- After an edit of the policy, `--check --diff` reports exactly the steps the edit changes and
  changes nothing: no file (bytes or mtime), no QOS, no handler, no temporary file left.
- The other two ways (the slurmgpu_tiers module beside a site's job_submit.lua, the QOS by the
  emitted qos-apply.sh) converge too, and their second run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "ansible" / "site.yml"
SNAPSHOT = ROOT / "etc" / "examples" / "dgx-h100.json"
SLURMGPU = Path(sys.executable).parent / "slurmgpu"

# QOS names of their own, so that nothing collides with the other tests' QOS in the session
POLICY = """\
default_tier = "P2"
priority_weight_qos = 10000

[partitions.gpu]

[tiers.P0]
qos = "ansible_p0"
priority = 1000
preempts = ["P2"]
grace_time_s = 5

[tiers.P2]
qos = "ansible_p2"
priority = 100

[kinds.training]
slice = "gpu:1"
partition = "gpu"
time_limit_min = 60
"""

FABRIC = """\
[[switch]]
name = "leaf1"
nodes = "gpu01"

[[switch]]
name = "spine"
switches = "leaf1"
"""

RENDER_STEPS = {
    "Make the directories of the installed files",
    "Install the site policy",
    "Install the switch description",
    "Install the systemd units, health check, epilog and logrotate files",
    "Write the node block",
    "Render gres.conf",
    "Render topology.conf (and topology.yaml for Slurm >= 25.05)",
    "Bring the QOS to the policy",
    "Render the job_submit Lua",
}
RECONFIGURE = "Slurmgpu reconfigure"

_RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", re.M)
_HEADER = re.compile(r"^(?:TASK|RUNNING HANDLER) \[slurmgpu : (.+?)\] \**$")
_RESULT = re.compile(r"^(ok|changed|skipping|fatal|failed): \[")


def ansible_playbook() -> list[str]:
    """ansible-core from the `test` extra; a missing one fails the test (never skips it)."""
    try:
        import ansible  # noqa: F401
    except ImportError:
        pytest.fail(
            "the Ansible role test needs ansible-core: pip install -e '.[test]' "
            "(sudo ./scripts/run-tests installs it)",
            pytrace=False,
        )
    return [sys.executable, "-m", "ansible.cli.playbook"]


def recap(output: str) -> dict[str, int]:
    """The PLAY RECAP counters of the one host."""
    hosts = {m[1]: dict(kv.split("=") for kv in m[2].split()) for m in _RECAP.finditer(output)}
    assert list(hosts) == ["localhost"], output[-3000:]
    return {key: int(value) for key, value in hosts["localhost"].items()}


def results(output: str) -> dict[str, list[str]]:
    """Each role task's and handler's result lines (ok, changed, skipping, fatal), by name."""
    seen: dict[str, list[str]] = {}
    name = None
    for line in output.splitlines():
        header = _HEADER.match(line)
        if header:
            name = header[1]
            seen.setdefault(name, [])
        elif name and (result := _RESULT.match(line)):
            seen[name].append(result[1])
    return seen


def changed(output: str) -> set[str]:
    return {name for name, states in results(output).items() if "changed" in states}


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under root: its bytes and mtime."""
    return {
        str(path.relative_to(root)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def qos_rows(cluster) -> dict[str, tuple[str, str]]:
    out = cluster.sacctmgr(
        "show", "qos", "--parsable2", "--noheader", "format=name,priority,preempt"
    )
    rows = (line.split("|") for line in out.splitlines() if line.startswith("ansible_"))
    return {name: (priority, preempt) for name, priority, preempt in rows}


def player(tmp_path: Path, groups: tuple[str, ...], variables: dict):
    """A function that runs ansible/site.yml over localhost (in `groups`, local connection,
    this Python) with `variables`, its own ANSIBLE_HOME and TMPDIR, and returns the run."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "".join(f"[{group}]\nlocalhost\n\n" for group in groups)
        + f"[all:vars]\nansible_connection=local\nansible_python_interpreter={sys.executable}\n"
    )
    (tmp_path / "vars.json").write_text(json.dumps({"slurmgpu_become": False} | variables))
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "ANSIBLE"))} | {
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PIPELINING": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "LC_ALL": "C.UTF-8",  # ansible-core refuses a locale that is not UTF-8
        "TMPDIR": str(tmp_path / "tmp"),
    }

    def play(*extra: str) -> subprocess.CompletedProcess:
        argv = [*ansible_playbook(), "-i", str(inventory), str(PLAYBOOK),
                "-e", f"@{tmp_path / 'vars.json'}", *extra]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        return proc

    return play


@pytest.fixture
def site(slurm_cluster, tmp_path):
    """The play's inputs: inventory, variables, the policy and switch files on the control host;
    afterwards the QOS it added are undone through the role's own journal."""
    prefix = tmp_path / "root"
    (prefix / "etc" / "slurm").mkdir(parents=True)
    files = tmp_path / "control"
    files.mkdir()
    (files / "slurmgpu.toml").write_text(POLICY)
    (files / "switches.toml").write_text(FABRIC)
    log = prefix / "var" / "lib" / "slurmgpu" / "qos.jsonl"
    variables = {
        # the install step runs against this test environment, where slurmgpu and the
        # analysis extra are installed already: pip finds them, nothing is downloaded
        "slurmgpu_venv": sys.prefix,
        "slurmgpu_environment": slurm_cluster.env,
        "slurmgpu_slurm_conf_dir": str(prefix / "etc" / "slurm"),
        "slurmgpu_policy_src": str(files / "slurmgpu.toml"),
        "slurmgpu_policy_path": str(prefix / "etc" / "slurmgpu" / "slurmgpu.toml"),
        "slurmgpu_units_prefix": str(prefix),
        "slurmgpu_gres_snapshot": str(SNAPSHOT),
        "slurmgpu_node_name": slurm_cluster.node_name,
        "slurmgpu_node_conf_path": str(prefix / "etc" / "slurm" / "nodes.d" / "gpu01.conf"),
        "slurmgpu_topology_switches_src": str(files / "switches.toml"),
        "slurmgpu_topology_switches": str(prefix / "etc" / "slurmgpu" / "switches.toml"),
        "slurmgpu_topology_args": ["--nodes", slurm_cluster.node_name],
        "slurmgpu_qos_log": str(log),
    }
    play = player(tmp_path, ("slurm_controller", "gpu_nodes"), variables)
    try:
        yield play, prefix, files
    finally:
        if log.exists():  # the journal of the first run's apply: slurmdbd as before it
            undo = [str(SLURMGPU), "qos", "apply", "--undo", "--log", str(log)]
            done = slurm_cluster.run(undo, check=False)
            assert done.returncode == 3, done.stdout + done.stderr  # 3: slurmdbd changed
        assert not qos_rows(slurm_cluster)


def test_role_converges_then_changes_nothing_and_check_changes_nothing(site, slurm_cluster):
    play, prefix, files = site
    cluster = slurm_cluster
    assert not qos_rows(cluster)

    first = play()
    counts = recap(first.stdout)
    assert counts["failed"] == 0 and counts["changed"] >= len(RENDER_STEPS), first.stdout[-3000:]
    assert changed(first.stdout) == RENDER_STEPS | {RECONFIGURE}, results(first.stdout)
    assert results(first.stdout)["Install slurmgpu into its venv"] == ["ok"]

    # the cluster has the QOS, and the files are ones Slurm's parser accepts
    assert qos_rows(cluster) == {"ansible_p0": ("1000", "ansible_p2"), "ansible_p2": ("100", "")}
    slurm = prefix / "etc" / "slurm"
    node_block = (slurm / "nodes.d" / "gpu01.conf").read_text()
    assert f"NodeName={cluster.node_name} " in node_block and "Gres=gpu:h100:8" in node_block
    (node_line,) = (line for line in node_block.splitlines() if line.startswith("NodeName="))
    check = cluster.validate_gres((slurm / "gres.conf").read_text(), node_line)
    assert check.ok and len(check.records) == 8, check.output
    units = prefix / "etc" / "systemd" / "system"
    assert str(SLURMGPU) in (units / "slurmgpu-collect.service").read_text()

    second = play()
    counts = recap(second.stdout)
    assert counts["changed"] == 0 and counts["failed"] == 0, results(second.stdout)
    assert RECONFIGURE not in results(second.stdout)

    # an edit of the policy: --check --diff says what would change and changes nothing
    before = tree(prefix)
    (files / "slurmgpu.toml").write_text(POLICY.replace("priority = 100\n", "priority = 150\n"))
    look = play("--check", "--diff")
    counts = recap(look.stdout)
    assert counts["failed"] == 0 and counts["changed"] == 3, look.stdout[-3000:]
    assert changed(look.stdout) == {
        "Install the site policy",
        "Bring the QOS to the policy",
        "Render the job_submit Lua",
    }
    assert "sacctmgr -i modify qos where name=ansible_p2 set Priority=150" in look.stdout
    assert "+local POLICY_DIGEST" in look.stdout  # the job_submit.lua diff is shown
    assert results(look.stdout).get(RECONFIGURE, []) in ([], ["skipping"])
    assert tree(prefix) == before
    assert qos_rows(cluster)["ansible_p2"] == ("100", "")
    assert list((prefix.parent / "tmp").iterdir()) == []  # the staged policy is gone

    # what the first run wrote is what slurmctld loads: the job_submit.lua routes a job to the
    # policy's default tier, and the topology is the switch file's
    cluster.run(["cp", str(slurm / "topology.conf"), str(cluster.conf_dir / "topology.conf")])
    try:
        cluster.reconfigure(
            job_submit_lua=(slurm / "job_submit.lua").read_text(),
            extra_conf="TopologyPlugin=topology/tree",
        )
        job = cluster.sbatch("--wrap", "true")
        shown = cluster.scontrol("show", "job", str(job))
        assert "QOS=ansible_p2" in shown, shown
        assert "SwitchName=leaf1" in cluster.scontrol("show", "topology")
    finally:
        (cluster.conf_dir / "topology.conf").unlink(missing_ok=True)
        cluster.reset()


SITE_POLICY = """\
default_tier = "P2"

[partitions.gpu]

[tiers.P2]
qos = "ansible_s2"
priority = 10
accounts = ["ansible_site"]
"""


def test_role_module_and_emitted_qos_script_converge(slurm_cluster, tmp_path):
    """The role's other two ways, on a controller alone: the slurmgpu_tiers module beside the
    site's own job_submit.lua (which the handler touches so that slurmctld reloads it), and
    the QOS by the emitted qos-apply.sh. Converges, then a second run changes nothing."""
    cluster = slurm_cluster
    slurm = tmp_path / "etc" / "slurm"
    slurm.mkdir(parents=True)
    site_script = slurm / "job_submit.lua"
    site_script.write_text((ROOT / "tests" / "data" / "tiers" / "site-job_submit.lua").read_text())
    os.utime(site_script, (1_600_000_000, 1_600_000_000))
    (tmp_path / "slurmgpu.toml").write_text(SITE_POLICY)
    cluster.sacctmgr("add", "account", "ansible_site", "Description=ansible role test")
    play = player(
        tmp_path,
        ("slurm_controller",),
        {
            "slurmgpu_install": False,
            "slurmgpu_bin": str(SLURMGPU),
            "slurmgpu_units": False,
            "slurmgpu_environment": cluster.env,
            "slurmgpu_slurm_conf_dir": str(slurm),
            "slurmgpu_policy_src": str(tmp_path / "slurmgpu.toml"),
            "slurmgpu_policy_path": str(tmp_path / "etc" / "slurmgpu" / "slurmgpu.toml"),
            "slurmgpu_job_submit_module": True,
            "slurmgpu_qos_method": "script",
            "slurmgpu_qos_emit_dir": str(tmp_path / "qos-emit"),
            "slurmgpu_reconfigure_command": ["scontrol", "reconfigure"],
        },
    )
    try:
        first = play()
        assert changed(first.stdout) == {
            "Make the directories of the installed files",
            "Install the site policy",
            "Run qos-apply.sh",
            "Render the job_submit Lua",
            "Slurmgpu reload the site job_submit.lua",
            RECONFIGURE,
        }, results(first.stdout)
        assert results(first.stdout)["Bring the QOS to the policy"] == ["ok"]  # only emitted
        assert qos_rows(cluster) == {"ansible_s2": ("10", "")}
        lists = cluster.sacctmgr("show", "assoc", "account=ansible_site", "format=qos", "-P", "-n")
        assert "ansible_s2" in lists
        assert (slurm / "slurmgpu_tiers.lua").exists()
        touched = site_script.stat().st_mtime
        assert touched > 1_600_000_000  # the site's script, touched for slurmctld

        second = play()
        assert recap(second.stdout)["changed"] == 0, results(second.stdout)
        assert results(second.stdout)["Run qos-apply.sh"] == ["skipping"]
        assert site_script.stat().st_mtime == touched
    finally:
        cluster.sacctmgr("delete", "account", "ansible_site", check=False)
        cluster.sacctmgr("delete", "qos", "ansible_s2", check=False)
    assert not qos_rows(cluster)
