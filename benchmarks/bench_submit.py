"""Submission cost of the tiers: slurmctld with/without job_submit.lua, and the wrapper's start-up.

Brings up the harness cluster (real munge, MariaDB, slurmdbd, slurmctld, slurmd; root only),
then measures in one run:
  1. `sbatch --hold` throughput, N jobs one after another, without and with the rendered
     job_submit.lua (tier/kind tags in the comment, so the routing really runs);
  2. start-up of `slurmgpu submit --dry-run` (through a console script as pip writes it, and
     through `python -m slurmgpu`) against `python -c 'import click'` (the floor of
     any click program; goal <= 1.5x) and against one real `sbatch` submission.
Run: sudo /path/to/venv/bin/python benchmarks/bench_submit.py [--jobs 100] [--rounds 3] [--runs 15]
     /path/to/venv/bin/python benchmarks/bench_submit.py --startup-only [--runs 15]
--startup-only needs no cluster and no root: it skips part 1 and the `sbatch` row, and fills
the GRES cache with the harness node's GRES, as a first `--gpu-mem` submission leaves it.

Bytecode: `pip install` compiles the package, so users never run slurmgpu from source. The
children run with PYTHONDONTWRITEBYTECODE unset and PYTHONPYCACHEPREFIX in a temporary
directory, so the warm-up runs compile slurmgpu (and click, and the stdlib) once, as an
install does. Under PYTHONDONTWRITEBYTECODE=1 in a checkout without `__pycache__`, every run
would compile slurmgpu's modules again; the `source tree, no bytecode` row shows that case
(a copy of the package without `__pycache__`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmgpu.render.job_submit import render_job_submit  # noqa: E402
from slurmgpu.sources.policy_file import load_policy  # noqa: E402

POLICY = ROOT / "tests" / "data" / "tiers" / "policy-integration.toml"
NODE_LINE = (
    "NodeName=gpu01 CPUs=16 Sockets=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=64000 "
    "Gres=gpu:h100:8,shard:32"
)
GRES_CONF = "Name=gpu Type=h100 File=/dev/nvidia[0-7]\nName=shard Count=32\n"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) for one run of `argv`.

    CPU time is reported too because this machine is shared: wall time includes waiting for
    a core, CPU time is what the program itself costs.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"{argv[:4]} failed ({status})")
    return wall, usage.ru_utime + usage.ru_stime


def throughput(cluster, jobs: int, comment: str) -> float:
    """Jobs per second for `jobs` sequential `sbatch --hold` submissions."""
    env = {**os.environ, **cluster.env}
    argv = ["sbatch", "--hold", "-A", "rnd", f"--comment={comment}", "--wrap", "true"]
    start = time.perf_counter()
    for _ in range(jobs):
        subprocess.run(argv, env=env, check=True, capture_output=True, cwd=cluster.work_dir)
    rate = jobs / (time.perf_counter() - start)
    cluster.scancel_all(timeout=120)
    return rate


def measure_throughput(jobs: int, rounds: int, runs: int):
    """Median jobs/s per slurmctld configuration, then the start-up runs on the same cluster."""
    from tests.harness import SlurmCluster

    policy = load_policy(POLICY)
    with SlurmCluster() as cluster:  # up() on entry, down() on exit
        cluster.sacctmgr("add", "account", "prod,rnd", check=False)
        cluster.sacctmgr("add", "user", "root", "account=prod,rnd", check=False)
        subprocess.run(
            [sys.executable, "-m", "slurmgpu", "qos", "apply", "--policy", str(POLICY)],
            env={**os.environ, **cluster.env},
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        comment = "bench tier=P1 kind=finetune"
        trivial = (
            "function slurm_job_submit(j, p, u) return slurm.SUCCESS end\n"
            "function slurm_job_modify(j, r, p, u) return slurm.SUCCESS end\n"
        )
        configs = {"plain": None, "trivial": trivial, "routed": render_job_submit(policy)}
        rates: dict[str, list[float]] = {k: [] for k in configs}
        # rounds of all three, so load from other work on the machine hits each alike
        for _ in range(rounds):
            for name, lua in configs.items():
                cluster.reconfigure(node_line=NODE_LINE, gres_conf=GRES_CONF, job_submit_lua=lua)
                rates[name].append(throughput(cluster, jobs, comment))
        samples = measure_startup(runs, cluster.env, with_sbatch=True)
        cluster.scancel_all(timeout=120)
    return {k: statistics.median(v) for k, v in rates.items()}, samples


def measure_startup(
    runs: int, cluster_env: dict[str, str] | None, with_sbatch: bool
) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) samples of each start-up case, `runs` interleaved runs."""
    env = {**os.environ, **(cluster_env or {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiled once, as `pip install` does
    with tempfile.TemporaryDirectory() as tmp:
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        script = Path(tmp) / "job.sh"
        script.write_text("#!/bin/sh\n#SBATCH -J bench\ntrue\n")
        # not `tmp` itself: `tmp/slurmgpu` is the console script, the cache needs that name
        env["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
        py = sys.executable
        # what `pip install` writes as the `slurmgpu` console script (what users type)
        entry = Path(tmp) / "slurmgpu"
        entry.write_text(
            f"#!{py}\nimport re\nimport sys\nfrom slurmgpu.cli import main\n"
            "if __name__ == '__main__':\n"
            "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
            "    sys.exit(main())\n"
        )
        entry.chmod(0o755)
        env["PYTHONPATH"] = str(ROOT)
        # the same package from source: a copy without __pycache__, bytecode never written
        source_root = Path(tmp) / "source"
        shutil.copytree(
            ROOT / "slurmgpu",
            source_root / "slurmgpu",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        env_source = {**env, "PYTHONPATH": str(source_root), "PYTHONDONTWRITEBYTECODE": "1"}
        del env_source["PYTHONPYCACHEPREFIX"]
        if cluster_env is None:
            # the cache a first --gpu-mem submission on the harness node leaves (sinfo's line)
            from slurmgpu.sources.cluster_gres import cache_path, format_cache, parse_sinfo_gres

            nodes = parse_sinfo_gres("gpu01|gpu:h100:8,shard:32\n")
            cache = cache_path(env)
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            # a long-lived stamp: the runs take longer than the 60 s TTL on a loaded machine
            Path(cache).write_text(format_cache(nodes, time.time() + 3600), encoding="utf-8")
        args_tier = ["submit", "--tier", "P1", "--kind", "finetune", "--policy", str(POLICY)]
        args_tier += ["--dry-run", "-A", "rnd", "--", str(script)]
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "click": ([py, "-c", "import click"], env),
            "wrapper": ([str(entry), *args_tier], env),
            "wrapper_m": ([py, "-m", "slurmgpu", *args_tier], env),
            "wrapper_mem": (
                [str(entry), "submit", "--gpu-mem", "10G", "--dry-run", "--", str(script)],
                env,
            ),
            "wrapper_src": ([str(entry), *args_tier], env_source),
        }
        if with_sbatch:
            cases["sbatch"] = (["sbatch", "--hold", "-A", "rnd", "--wrap", "true"], env)
        for argv, case_env in cases.values():  # warm-up: bytecode, GRES cache, page cache
            timed(argv, case_env)
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        for _ in range(runs):  # interleaved, so machine noise hits all alike
            for key, (argv, case_env) in cases.items():
                samples[key].append(timed(argv, case_env))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="jobs per round and config")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--startup-only", action="store_true", help="only the start-up part (no cluster, no root)"
    )
    args = parser.parse_args()

    if args.startup_only:
        rates = None
        samples = measure_startup(args.runs, None, with_sbatch=False)
    else:
        rates, samples = measure_throughput(args.jobs, args.rounds, args.runs)
    wall = {k: statistics.median(w for w, _ in v) * 1000 for k, v in samples.items()}
    cpu = {k: statistics.median(c for _, c in v) * 1000 for k, v in samples.items()}

    where = "start-up only, no cluster" if rates is None else "Slurm 22.05 harness cluster"
    print(
        f"# slurmgpu tiers benchmark ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} CPUs, {where})"
    )
    print()
    if rates is not None:
        plain, floor, routed = (rates[k] for k in ("plain", "trivial", "routed"))
        print(
            f"sbatch --hold throughput, median of {args.rounds} rounds of {args.jobs} "
            "sequential submissions:"
        )
        print(f"  no job_submit plugin    {plain:7.1f} jobs/s")
        print(
            f"  trivial job_submit.lua  {floor:7.1f} jobs/s   "
            f"(ratio {floor / plain:.2f}: plugin cost)"
        )
        print(f"  slurmgpu job_submit.lua {routed:7.1f} jobs/s   (ratio {routed / plain:.2f})")
        print()
    print(f"start-up, median of {args.runs} interleaved runs (wall ms / CPU ms):")
    rows = [
        ("click", "python -c 'import click'"),
        ("wrapper", "slurmgpu submit --tier --kind --dry-run"),
        ("wrapper_m", "python -m slurmgpu submit (same)"),
        ("wrapper_mem", "slurmgpu submit --gpu-mem 10G --dry-run"),
        ("wrapper_src", "same as 2nd, source tree, no bytecode"),
        ("sbatch", "sbatch --hold (one real submission)"),
    ]
    for key, label in rows:
        if key in wall:
            print(f"  {label:42s} {wall[key]:7.1f} / {cpu[key]:6.1f}")
    print("ratios (wall / CPU):")
    for key, label in (
        ("wrapper", "--tier --kind"),
        ("wrapper_m", "(python -m)"),
        ("wrapper_mem", "--gpu-mem"),
        ("wrapper_src", "(no bytecode)"),
    ):
        print(
            f"  wrapper {label:14s} vs import click: {wall[key] / wall['click']:.2f}x / "
            f"{cpu[key] / cpu['click']:.2f}x   (goal <= 1.5x)"
        )
    if "sbatch" in wall:
        print(
            f"  wrapper --tier --kind  vs sbatch:       {wall['wrapper'] / wall['sbatch']:.2f}x / "
            f"{cpu['wrapper'] / cpu['sbatch']:.2f}x"
        )


if __name__ == "__main__":
    main()
