"""`slurmgpu inventory` and `slurmgpu gen-gres` through click's CliRunner (and one subprocess)."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from tests.doubles.machines import (
    EXAMPLES,
    MACHINES,
    ROOT,
    install_double,
    setup_machine,
    subprocess_env,
)


@pytest.fixture
def nvml(monkeypatch):
    return install_double(monkeypatch)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_inventory_to_stdout_is_the_example(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "dgx-h100")
    result = invoke("inventory", "--host-root", root)
    assert result.exit_code == 0, result.output
    assert result.stdout == (EXAMPLES / "dgx-h100.json").read_text()


def test_inventory_to_file(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "pcie-8gpu")
    out = tmp_path / "node.json"
    result = invoke("inventory", "--host-root", root, "--output", out)
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text())["schema_version"] == 2
    assert "wrote" in result.stderr


def _lose(machine):
    machine["gpus"][3]["lost"] = True


def test_inventory_gpu_lost_fails_writing_nothing(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "dgx-h100", change=_lose)
    out = tmp_path / "node.json"
    result = invoke("inventory", "--host-root", root, "--output", out)
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "slurmgpu: error: GPU 3: NVML error: GPU is lost (fell off the bus? check dmesg for Xid 79)"
    )
    assert not out.exists()


def test_inventory_allow_partial_is_loud(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "dgx-h100", change=_lose)
    out = tmp_path / "node.json"
    result = invoke("inventory", "--host-root", root, "--output", out, "--allow-partial")
    assert result.exit_code == 0
    assert "WARNING: PARTIAL inventory: 1 GPU(s) left out" in result.stderr
    # and gen-gres from it refuses unless asked again, then marks the file
    refused = invoke("gen-gres", "--snapshot", out, "--slurm-version", "22.05")
    assert refused.exit_code == 1 and "--allow-partial" in refused.stderr
    ok = invoke("gen-gres", "--snapshot", out, "--slurm-version", "22.05", "--allow-partial")
    assert ok.exit_code == 0
    assert "# !!! PARTIAL" in ok.stdout and "WARNING: PARTIAL gres.conf" in ok.stderr


def test_inventory_nvml_init_failure(nvml, tmp_path):
    def broken(machine):
        machine["init_error"] = "DRIVER_NOT_LOADED"

    root = setup_machine(nvml, tmp_path, "dgx-h100", change=broken)
    result = invoke("inventory", "--host-root", root)
    assert result.exit_code == 1
    # --vendor auto: no vendor readable; the line says why NVIDIA was not
    assert result.stderr.startswith(
        "slurmgpu: error: no accelerator found: NVIDIA: NVML failed to initialise: "
        "Driver Not Loaded; "
    )
    assert result.stderr.count("\n") == 1
    result = invoke("inventory", "--host-root", root, "--vendor", "nvidia")
    assert result.exit_code == 1
    assert result.stderr == "slurmgpu: error: NVML failed to initialise: Driver Not Loaded\n"


def test_gen_gres_quick_start_prints_node_line_then_gres_conf():
    result = invoke(
        "gen-gres",
        "--snapshot",
        EXAMPLES / "dgx-h100.json",
        "--node-line",
        "--output",
        "-",
        "--slurm-version",
        "22.05.8",
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    gres_types = lines.index("GresTypes=gpu")
    node = next(i for i, line in enumerate(lines) if line.startswith("NodeName=dgxh100 "))
    auto = lines.index("AutoDetect=off")
    assert gres_types < node < auto
    assert lines[node].endswith("Gres=gpu:h100:8")
    assert sum(1 for line in lines if line.startswith("Name=gpu Type=h100 File=")) == 8


def test_gen_gres_writes_atomically_with_backup_and_diff_writes_nothing(tmp_path):
    target = tmp_path / "gres.conf"
    snap = EXAMPLES / "dgx-a100-mig.json"
    first = invoke("gen-gres", "--snapshot", snap, "--output", target, "--slurm-version", "22.05")
    assert first.exit_code == 3 and target.exists()  # 3: written (docs/acting.md)
    before = target.read_text()
    diff = invoke(
        "gen-gres", "--snapshot", snap, "--output", target, "--diff", "--slurm-version", "24.05.5"
    )
    assert diff.exit_code == 3  # they differ (docs/acting.md, exit codes)
    assert "-Name=gpu Type=a100 File=/dev/nvidia3 Cores=16-31" in diff.stdout
    assert "+Name=gpu Type=a100 File=/dev/nvidia3 Cores=0-63" in diff.stdout
    assert target.read_text() == before and not (tmp_path / "gres.conf.bak").exists()
    again = invoke("gen-gres", "--snapshot", snap, "--output", target, "--slurm-version", "24.05.5")
    assert again.exit_code == 3
    assert (tmp_path / "gres.conf.bak").read_text() == before
    assert "Cores=0-63" in target.read_text()
    same = [*("gen-gres", "--snapshot", snap, "--output", target, "--slurm-version", "24.05.5")]
    equal = invoke(*same, "--diff")
    assert equal.exit_code == 0 and equal.stdout == ""
    assert f"{target}: unchanged" in equal.stderr
    unchanged = invoke(*same)  # the same text again: not rewritten, the backup kept
    assert unchanged.exit_code == 0 and f"{target}: unchanged" in unchanged.stderr
    assert (tmp_path / "gres.conf.bak").read_text() == before
    dry = invoke(*same[:-1], "22.05", "--dry-run")
    assert dry.exit_code == 3 and "would write" in dry.stderr and "+Name=gpu" in dry.stdout
    assert "Cores=0-63" in target.read_text()
    emitted = invoke(*same[:-1], "22.05", "--emit", tmp_path / "emit")
    assert emitted.exit_code == 3, emitted.stderr  # the live file would change
    assert (tmp_path / "emit" / "gres.conf").read_text() == before
    assert f"--- {target}" in (tmp_path / "emit" / "changes.diff").read_text()
    assert "Cores=0-63" in target.read_text()


def test_gen_gres_same_input_same_bytes(tmp_path):
    args = ["gen-gres", "--snapshot", EXAMPLES / "pcie-8gpu.json", "--slurm-version", "22.05"]
    assert invoke(*args).stdout == invoke(*args).stdout


def test_gen_gres_usage_errors():
    snap = EXAMPLES / "dgx-h100.json"
    assert invoke("gen-gres", "--snapshot", snap, "--diff").exit_code == 2
    bad_version = invoke("gen-gres", "--snapshot", snap, "--slurm-version", "new")
    assert bad_version.exit_code == 2 and "not a Slurm version" in bad_version.stderr
    shards = invoke(
        "gen-gres",
        "--snapshot",
        EXAMPLES / "dgx-a100-mig.json",
        "--shards-per-gpu",
        "2",
        "--slurm-version",
        "22.05",
    )
    assert shards.exit_code == 2 and "MIG" in shards.stderr


def test_gen_gres_bad_snapshot_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    data = json.loads((EXAMPLES / "dgx-h100.json").read_text())
    data["gpus"][3]["pci_bus_id"] = 7
    bad.write_text(json.dumps(data))
    result = invoke("gen-gres", "--snapshot", bad, "--slurm-version", "22.05")
    assert result.exit_code == 1
    assert result.stderr == (
        f"slurmgpu: error: {bad}: gpus[3].pci_bus_id: expected a string, got 7\n"
    )


def test_gen_gres_live_read_over_the_double(nvml, tmp_path):
    root = setup_machine(nvml, tmp_path, "pcie-8gpu")
    result = invoke("gen-gres", "--host-root", root, "--slurm-version", "22.05", "--node-line")
    assert result.exit_code == 0, result.stderr
    assert "File=/dev/nvidia[0-3]" in result.stdout and "NodeName=pcie8 " in result.stdout


def test_inventory_in_a_subprocess_over_the_double(tmp_path):
    from tests.doubles.hosttree import build_host_tree

    machine = MACHINES / "dgx-a100-mig.json"
    root = build_host_tree(machine, tmp_path / "host")
    proc = subprocess.run(
        [sys.executable, "-m", "slurmgpu", "inventory", "--host-root", str(root)],
        capture_output=True,
        text=True,
        env=subprocess_env(machine),
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (EXAMPLES / "dgx-a100-mig.json").read_text()


def test_examples_and_machines_are_fresh():
    from tests.doubles import build_machines

    for name in build_machines.MACHINES:
        assert (MACHINES / f"{name}.json").read_text() == build_machines.render(name), name
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make-examples"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_gen_gres_emit_keeps_the_node_line(tmp_path):
    """#33: `gen-gres --node-line --emit DIR` left the node definition out of DIR (config
    management had gres.conf without its slurm.conf line). It is DIR/slurm-node.conf."""
    target = tmp_path / "gres.conf"
    snap = EXAMPLES / "dgx-h100.json"
    args = ["gen-gres", "--snapshot", snap, "--slurm-version", "22.05", "--node-line"]
    out = invoke(*args, "--output", target, "--emit", tmp_path / "emit")
    assert out.exit_code == 3, out.stderr  # gres.conf would change (it is absent)
    node = (tmp_path / "emit" / "slurm-node.conf").read_text()
    assert node == invoke(*args, "--output", "-").stdout.split("\n\n")[0] + "\n"
    assert "NodeName=" in node and "GresTypes=gpu" in node and not target.exists()
    cluster = invoke("gen-gres", "--snapshot", snap, "--snapshot", EXAMPLES / "pcie-8gpu.json",
                     "--slurm-version", "22.05", "--node-line", "--output", target,
                     "--emit", tmp_path / "emit2")  # fmt: skip
    assert cluster.exit_code == 3, cluster.stderr
    assert "NodeName=" in (tmp_path / "emit2" / "slurm-node.conf").read_text()
