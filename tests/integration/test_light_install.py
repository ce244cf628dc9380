"""The light install: `pip install .` without extras into a fresh venv pulls neither pandas,
pyarrow, numpy nor numba; the node-side commands work from it (submit --dry-run, collect and
inventory against the NVML double, gen-gres --check through the real `slurmd -G`, check
--local against the real test cluster, install-units from the wheel's kit) and `analyze`
says which extra it needs.

pip may use its cache and the machine's configured indexes (a few seconds here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles.hosttree import build_host_tree

ROOT = Path(__file__).resolve().parents[2]
MACHINE = ROOT / "tests" / "data" / "machines" / "dgx-h100.json"
DOUBLES = ROOT / "tests" / "doubles"


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("light") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    proc = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return venv


def light(venv: Path, *args: str, env: dict | None = None, cwd: Path | None = None):
    """The installed `slurmgpu` of the light venv; the only thing on PYTHONPATH is the NVML
    double (so the checkout's own sources are never imported)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "PYTHON"))} | {
        "PYTHONPATH": str(DOUBLES),
        "SLURMGPU_FAKE_NVML_MACHINE": str(MACHINE),
    }
    return subprocess.run(
        [str(venv / "bin" / "slurmgpu"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full | (env or {}),
        cwd=cwd or venv,
    )


def test_light_install_has_no_analysis_stack(light_venv):
    python = str(light_venv / "bin" / "python")
    code = (
        "import importlib.util as u; "
        "print([m for m in ('pandas', 'pyarrow', 'numpy', 'numba') if u.find_spec(m)])"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    where = subprocess.run(
        [python, "-c", "import slurmgpu; print(slurmgpu.__file__)"],
        capture_output=True, text=True, check=True, cwd=light_venv,
    )  # fmt: skip
    assert str(light_venv) in where.stdout  # the installed package, not the checkout


def test_node_commands_work_without_the_extra(light_venv, tmp_path, slurm_cluster):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nsleep 1\n")
    policy = ROOT / "etc" / "slurmgpu.toml"
    out = light(light_venv, "submit", "--dry-run", "--policy", str(policy), "--tier", "P2",
                "--", str(script))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.strip()
        == f"sbatch --qos=p2 --requeue --open-mode=append --comment=tier=P2 {script}"
    )

    host = build_host_tree(MACHINE, tmp_path / "host")
    out = light(
        light_venv, "inventory", "--host-root", str(host), "--output", str(tmp_path / "n.json")
    )
    assert out.returncode == 0, out.stderr
    out = light(light_venv, "gen-gres", "--snapshot", str(tmp_path / "n.json"), "--check",
                "--output", str(tmp_path / "gres.conf"))  # fmt: skip
    assert out.returncode == 3, out.stderr  # 3: written (docs/acting.md, exit codes)
    assert (
        "Name=gpu Type=h100 File=/dev/nvidia7 Cores=56-111" in (tmp_path / "gres.conf").read_text()
    )

    collect_host = ROOT / "tests" / "data" / "collect" / "host"
    out = light(light_venv, "collect", "--host-root", str(collect_host), "--node", "n1",
                "--state", str(tmp_path / "state.json"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("8 GPU devices")

    out = light(light_venv, "check", "--local", "--node", slurm_cluster.node_name,
                "--host-root", str(host), env=slurm_cluster.env)  # fmt: skip
    assert "internal error" not in out.stderr and "extra" not in out.stderr, out.stderr
    assert out.returncode in (0, 1) and out.stdout.strip(), (out.stdout, out.stderr)


def test_install_units_from_the_wheel_names_the_venvs_command(light_venv, tmp_path):
    """The kit travels in the wheel (slurmgpu/etc) and ExecStart is this venv's command."""
    out = light(light_venv, "install-units", "--prefix", str(tmp_path / "stage"))
    assert out.returncode == 3, out.stderr  # 3: written (docs/acting.md, exit codes)
    units = tmp_path / "stage" / "etc" / "systemd" / "system"
    # #33: no unit whose command needs the analysis extra, and none suggested
    assert not [p.name for p in units.iterdir() if p.name.startswith(("slurmgpu-report",
                "slurmgpu-ingest", "slurmgpu-autopilot"))]  # fmt: skip
    assert "note: left out report, store, autopilot: they need the analysis extra" in out.stdout
    assert "report" not in "".join(ln for ln in out.stdout.splitlines() if "next:" in ln)
    unit = units / "slurmgpu-collect.service"
    exe = light_venv / "bin" / "slurmgpu"
    assert f"ExecStart={exe} collect --state" in unit.read_text()
    wrapper = tmp_path / "stage" / "usr" / "local" / "sbin" / "slurmgpu-health"
    assert f"exec {exe} check --health-check" in wrapper.read_text()


def test_analyze_names_the_extra(light_venv):
    sacct = ROOT / "tests" / "data" / "sacct" / "uva-fixture.txt"
    for command in ("analyze", "report"):
        out = light(light_venv, command, "--sacct-file", str(sacct))
        assert out.returncode == 1
        assert out.stderr == (
            f"slurmgpu: error: {command} needs the analysis extra: "
            "pip install 'slurmgpu[analysis]'\n"
        )
