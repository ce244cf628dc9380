"""`slurmgpu submit`: argument handling, #SBATCH awareness, slice choice, fast start-up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmgpu.configure.submit import split_args
from slurmgpu.errors import UsageError
from slurmgpu.model.slicing import candidates, largest
from slurmgpu.render.sbatch import (
    Additions,
    build_argv,
    env_options,
    scan_options,
    script_directives,
)
from slurmgpu.sources.cluster_gres import (
    cache_path,
    format_cache,
    parse_cache,
    parse_sinfo_gres,
)
from tests.unit.tiers.lua_env import DATA, EXAMPLE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def run_submit(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "SLURM_CONF": "/nonexistent/slurm.conf", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "slurmgpu", "submit", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or ROOT,
        timeout=60,
    )


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "job.sh"
    path.write_text(
        "#!/bin/sh\n"
        "#SBATCH -J fromscript\n"
        "#SBATCH --time=5   # minutes\n"
        '#SBATCH --comment="my run"\n'
        "\n"
        "echo hi\n"
        "#SBATCH --partition=ignored-after-the-first-command\n"
    )
    return path


def test_split_args():
    ours, sbatch, rest, dry = split_args(
        [
            "--tier",
            "P1",
            "-p",
            "gpu",
            "--kind=finetune",
            "--time=10",
            "-J",
            "name",
            "--dry-run",
            "--",
            "job.sh",
            "--tier",
            "x",
        ]
    )
    assert ours == {"tier": "P1", "kind": "finetune"}
    assert sbatch == ["-p", "gpu", "--time=10", "-J", "name"]
    assert rest == ["job.sh", "--tier", "x"] and dry
    with pytest.raises(UsageError, match="--gpu-mem needs a value"):
        split_args(["--gpu-mem"])


def test_scan_options_forms():
    found = scan_options(
        [
            "-p",
            "gpu",
            "-t10",
            "--qos=p1",
            "-H",
            "-J",
            "x",
            "--gpus",
            "2",
            "--comment",
            "hello world",
            "-A=acct",
        ]
    )
    assert found.values == {
        "partition": "gpu",
        "time": "10",
        "qos": "p1",
        "gpus": "2",
        "comment": "hello world",
        "account": "acct",
    }
    assert found.has_gpu_request()
    assert not scan_options(["--gres=license:x"]).has_gpu_request()
    assert scan_options(["--gres", "shard:2"]).has_gpu_request()


def test_script_directives_stop_at_the_first_command(script):
    assert script_directives(script.read_text()) == [
        "-J",
        "fromscript",
        "--time=5",
        "--comment=my run",
    ]


def test_build_argv_adds_only_what_is_missing(script):
    add = Additions(
        qos="p1",
        gres="shard:2",
        partition="gpu",
        time_limit_min=720,
        tags={"tier": "P1", "kind": "finetune"},
    )
    argv = build_argv(
        "sbatch", ["-J", "name"], [str(script), "a"], script_directives(script.read_text()), add
    )
    # the script's --time stays, its comment is kept and tagged; -J passes untouched
    assert argv == [
        "sbatch",
        "-J",
        "name",
        "--qos=p1",
        "--gres=shard:2",
        "--partition=gpu",
        "--comment=my run tier=P1 kind=finetune",
        str(script),
        "a",
    ]
    argv = build_argv("sbatch", ["-p", "debug", "--gpus=1", "-q", "p1"], ["x.sh"], [], add)
    assert argv == [
        "sbatch",
        "-p",
        "debug",
        "--gpus=1",
        "-q",
        "p1",
        "--time=720",
        "--comment=tier=P1 kind=finetune",
        "x.sh",
    ]
    with pytest.raises(UsageError, match="the job comment says tier=P2"):
        build_argv("sbatch", ["--comment=tier=P2"], ["x.sh"], [], add)


NODES = parse_sinfo_gres(
    "gpu01|gpu:h100:8(S:0-1),shard:32(S:0-1)\n"
    "gpu02|gpu:nvidia_h100_80gb_hbm3_1g.20gb:4(S:0),gpu:nvidia_h100_80gb_hbm3_3g.40gb:2(S:1)\n"
    "gpu03|(null)\n"
    "gpu01|gpu:h100:8(S:0-1),shard:32(S:0-1)\n"
)


def test_parse_sinfo_gres():
    assert [n.node for n in NODES] == ["gpu01", "gpu02", "gpu03"]
    assert NODES[0].items == (("gpu", "h100", 8), ("shard", None, 32))


def test_cache_round_trip_and_expiry():
    text = format_cache(NODES, 1000.0)
    assert parse_cache(text, 1010.0, 60) == NODES
    assert parse_cache(text, 1061.0, 60) is None
    assert parse_cache("something else 1000\n", 1001.0, 60) is None


@pytest.mark.parametrize(
    "memory_gib,gres",
    [
        (10, "gpu:nvidia_h100_80gb_hbm3_1g.20gb:1"),  # 19.6 GiB MIG beats a 19.9 GiB shard
        (19.7, "shard:1"),
        (25, "gpu:nvidia_h100_80gb_hbm3_3g.40gb:1"),
        (45, "shard:3"),
        (70, "gpu:h100:1"),
        (100, "gpu:h100:2"),
    ],
)
def test_smallest_slice_that_fits(memory_gib, gres):
    assert candidates(NODES, memory_gib * 1024)[0].slice.gres == gres


def test_short_mig_type_names_count_the_smallest_variant():
    # gen-gres --mig-types short writes `3g.40gb`: A100 80GB (39.25 GiB) or H100 (39.5 GiB)
    nodes = parse_sinfo_gres("n1|gpu:3g.40gb:2,gpu:1g.10gb:3\n")
    assert candidates(nodes, 39.3 * 1024) == []
    assert candidates(nodes, 39.2 * 1024)[0].slice.gres == "gpu:3g.40gb:1"
    assert candidates(nodes, 4 * 1024)[0].slice.gres == "gpu:1g.10gb:1"


def test_nothing_fits():
    assert candidates(NODES, 700 * 1024) == []
    assert largest(NODES).slice.gres == "gpu:h100:8"


def test_dry_run_prints_the_exact_command(script):
    result = run_submit(
        "--tier",
        "P1",
        "--kind",
        "finetune",
        "--policy",
        str(EXAMPLE),
        "--dry-run",
        "-p",
        "gpu",
        "-J",
        "my job",
        "--",
        str(script),
        "arg 1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "sbatch -p gpu -J 'my job' --qos=p1 --gres=gpu:3g.40gb:1 "
        f"'--comment=my run tier=P1 kind=finetune' {script} 'arg 1'\n"
    )


def test_gpu_mem_from_the_cached_cluster_gres(script, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "SLURM_CONF": str(tmp_path / "slurm.conf")}
    path = Path(cache_path(env))
    path.parent.mkdir(parents=True)
    nodes = parse_sinfo_gres("gpu01|gpu:h100:8,shard:h100:32\n")
    path.write_text(format_cache(nodes, time.time()))
    result = run_submit("--gpu-mem", "10G", "--dry-run", "--", str(script), env=env)
    assert result.returncode == 0, result.stderr
    assert "--gres=shard:1" in result.stdout.split()
    result = run_submit("--gpu-mem", "2T", "--dry-run", "--", str(script), env=env)
    assert result.returncode == 2
    assert result.stderr == (
        "slurmgpu: error: no GPU slice on this cluster holds 2T of GPU memory: "
        "the largest is gpu:h100:8 (637 GiB)\n"
    )


def test_gpu_mem_falls_back_to_the_policy(script, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "c"), "PATH": str(tmp_path)}  # no sinfo here
    result = run_submit(
        "--gpu-mem", "30G", "--policy", str(EXAMPLE), "--dry-run", "--", str(script), env=env
    )
    assert result.returncode == 0, result.stderr
    assert "--gres=gpu:3g.40gb:1" in result.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tier", "P9"], "slurmgpu: error: unknown tier 'P9': use P0, P1, P2\n"),
        (
            ["--kind", "x"],
            "slurmgpu: error: unknown job kind 'x': use inference, finetune, training\n",
        ),
        (
            ["--tier", "P1", "--qos", "p2"],
            "slurmgpu: error: --qos=p2 is tier P2, but --tier P1 was asked\n",
        ),
        (
            ["--gpu-mem", "lots"],
            "slurmgpu: error: --gpu-mem: not a memory size: 'lots' (use e.g. 10G, 8000M)\n",
        ),
    ],
)
def test_errors_are_one_line_exit_2(script, args, message):
    result = run_submit(*args, "--policy", str(EXAMPLE), "--dry-run", "--", str(script))
    assert (result.returncode, result.stderr) == (2, message)


def test_error_cases_without_script_or_policy(tmp_path, script):
    result = run_submit("--dry-run", "-p", "gpu")
    assert result.returncode == 2 and "put `--` and the batch script" in result.stderr
    result = run_submit("--dry-run", "--", str(tmp_path / "missing.sh"))
    assert result.returncode == 2 and "cannot read the batch script" in result.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('default_tier = "P9"\n[tiers.P0]\n')
    result = run_submit("--tier", "P0", "--policy", str(bad), "--dry-run", "--", str(script))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and f"{bad}:" in result.stderr


def test_wrap_needs_no_script():
    result = run_submit("--tier", "P2", "--policy", str(EXAMPLE), "--dry-run", "--wrap", "hostname")
    assert result.returncode == 0 and result.stdout.startswith("sbatch --wrap hostname --qos=p2")


def test_exec_runs_the_real_program(script, tmp_path):
    fake = tmp_path / "fakesbatch"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "[$a]"; done\n')
    fake.chmod(0o755)
    result = run_submit(
        "--tier",
        "P2",
        "--policy",
        str(EXAMPLE),
        "-J",
        "a b",
        "--",
        str(script),
        env={"SLURMGPU_SBATCH": str(fake)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[-J]",
        "[a b]",
        "[--qos=p2]",
        "[--requeue]",
        "[--open-mode=append]",
        "[--comment=my run tier=P2]",
        f"[{script}]",
    ]


def test_submit_path_imports_no_heavy_modules(script):
    code = (
        "import sys, runpy; sys.argv = ['slurmgpu', 'submit', '--tier', 'P1', '--kind', "
        f"'finetune', '--gpu-mem', '10G', '--policy', {str(EXAMPLE)!r}, '--dry-run', '--', "
        f"{str(script)!r}]\n"
        "from slurmgpu.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('pandas', 'pynvml', 'jinja2', 'pyarrow', 'numpy', 'lupa') "
        "if m in sys.modules)\nprint('HEAVY', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "SLURM_CONF": "/none"},
    )
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr
    assert "--gres=" in result.stdout


def test_policy_with_users_renders(tmp_path):
    # the wrapper only needs policy names; a policy with users and shards works too
    result = run_submit(
        "--kind",
        "inference",
        "--policy",
        str(DATA / "policy-users.toml"),
        "--dry-run",
        "--wrap",
        "true",
    )
    assert result.stdout.split() == [
        "sbatch",
        "--wrap",
        "true",
        "--gres=shard:1",
        "--partition=short",
        "--time=30",
        "--requeue",  # the default tier P2 is requeued when P0 preempts it
        "--open-mode=append",
        "--comment=kind=inference",
    ]


# --- preemptible tiers: requeueable, output kept across reruns --------------------------


def test_requeued_tier_adds_requeue_and_append():
    add = Additions(qos="p2", requeued_tier="P2")
    argv = build_argv("sbatch", [], ["job.sh"], [], add)
    assert argv == ["sbatch", "--qos=p2", "--requeue", "--open-mode=append", "job.sh"]
    # the job's own choices stand
    argv = build_argv("sbatch", ["--requeue", "--open-mode=truncate"], ["job.sh"], [], add)
    assert argv == ["sbatch", "--requeue", "--open-mode=truncate", "--qos=p2", "job.sh"]
    argv = build_argv("sbatch", [], ["job.sh"], ["--open-mode", "append"], add)
    assert argv.count("--open-mode=append") == 0 and "--requeue" in argv


@pytest.mark.parametrize("where", ["cmdline", "script"])
def test_no_requeue_in_a_requeued_tier_is_a_usage_error(where):
    args, directives = (["--no-requeue"], []) if where == "cmdline" else ([], ["--no-requeue"])
    with pytest.raises(UsageError, match="tier P2 jobs are requeued when preempted"):
        build_argv("sbatch", args, ["job.sh"], directives, Additions(requeued_tier="P2"))
    # the command line's --requeue wins over the script's --no-requeue, as in sbatch
    argv = build_argv(
        "sbatch", ["--requeue"], ["job.sh"], ["--no-requeue"], Additions(requeued_tier="P2")
    )
    assert argv[:2] == ["sbatch", "--requeue"]


def test_requeue_flags_take_no_value():
    found = scan_options(["--requeue", "-p", "gpu", "--no-requeue", "--open-mode=append"])
    assert found.get("requeue") == "0" and found.get("partition") == "gpu"
    assert found.get("open_mode") == "append"


def test_requeued_tier_from_the_policy(script):
    out = run_submit("--tier", "P2", "--policy", str(EXAMPLE), "--dry-run", "--", str(script))
    assert "--requeue" in out.stdout.split() and "--open-mode=append" in out.stdout.split()
    # P1 is never preempted: nothing added
    out = run_submit("--tier", "P1", "--policy", str(EXAMPLE), "--dry-run", "--", str(script))
    assert "--requeue" not in out.stdout and "--open-mode" not in out.stdout
    # a P1 QOS given directly counts as P1; nothing named: the default tier (P2)
    out = run_submit("--policy", str(EXAMPLE), "--qos=p1", "--dry-run", "--", str(script))
    assert "--requeue" not in out.stdout
    out = run_submit("--policy", str(EXAMPLE), "--dry-run", "--", str(script))
    assert "--requeue" in out.stdout.split()
    out = run_submit(
        "--tier", "P2", "--policy", str(EXAMPLE), "--no-requeue", "--dry-run", "--", str(script)
    )
    assert out.returncode == 2
    assert out.stderr == (
        "slurmgpu: error: tier P2 jobs are requeued when preempted: --no-requeue cannot be "
        "used in it\n"
    )


def test_kind_slice_is_added_to_a_non_gpu_gres():
    add = Additions(gres="gpu:1g.20gb:1")
    argv = build_argv("sbatch", ["--gres=nvme:1"], ["job.sh"], [], add)
    assert argv == ["sbatch", "--gres=nvme:1", "--gres=nvme:1,gpu:1g.20gb:1", "job.sh"]
    argv = build_argv("sbatch", [], ["job.sh"], ["--gres=nvme:1"], add)
    assert argv[-2] == "--gres=nvme:1,gpu:1g.20gb:1"
    # a GPU request of the job's own: nothing added
    argv = build_argv("sbatch", ["--gres=gpu:2"], ["job.sh"], [], add)
    assert argv == ["sbatch", "--gres=gpu:2", "job.sh"]


def test_sbatch_environment_counts_as_a_request(script):
    # an exported SBATCH_GPUS_PER_NODE is a GPU request as much as --gpus-per-node: the
    # kind's --gres is not added next to it (Slurm 26.05 rejects --gres=gpu:N with
    # --gpus-per-node), and SBATCH_PARTITION / SBATCH_TIMELIMIT are kept as the user's
    args = ("--kind", "finetune", "--policy", str(EXAMPLE), "--dry-run", "--", str(script))
    plain = run_submit(*args)
    assert plain.returncode == 0, plain.stderr
    assert "--gres=gpu:3g.40gb:1" in plain.stdout
    env = {"SBATCH_GPUS_PER_NODE": "2", "SBATCH_PARTITION": "debug", "SBATCH_TIMELIMIT": "5"}
    result = run_submit(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert "--gres" not in result.stdout and "--gpus-per-node" not in result.stdout
    assert "--partition" not in result.stdout and "--time" not in result.stdout
    # the command line still wins over the environment, as in sbatch
    assert env_options({"SBATCH_GRES": "shard:2", "SBATCH_REQUEUE": "", "OTHER": "x"}) == [
        "--gres=shard:2",
        "--requeue",
    ]
    assert scan_options([*env_options({"SBATCH_QOS": "p2"}), "-q", "p1"]).get("qos") == "p1"
