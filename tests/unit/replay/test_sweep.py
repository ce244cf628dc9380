"""`replay --via-slurm` without Slurm: the run directory, the task side and the gathering.

The task side is the real one (the hidden `replay-task` command, in-process); what these
tests cannot show (sbatch, squeue, sacct) is covered by tests/integration/test_replay_sweep.py.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import UsageError
from slurmgpu.model.changes import format_change
from slurmgpu.replay import ReplayOptions, parse_change, replay_trace
from slurmgpu.replay.from_accounting import load_trace
from slurmgpu.replay.results import window_of
from slurmgpu.replay.sweep import (
    LOGS,
    RESULTS,
    SlurmSweepOptions,
    _gather,
    read_result,
    replay_task,
    write_run,
    write_script,
)
from slurmgpu.replay.trace_file import load_trace_file, save_trace
from slurmgpu.util.json_safe import json_safe
from tests.unit.replay.test_what_if import history

DATA = Path(__file__).resolve().parents[2] / "data" / "sacct"
CANDIDATES = ("move:infer:train:16", "carve:infer:8:1g.10gb=7", "tier:normal:priority=5")


def options(*changes):
    return ReplayOptions(
        capacity={"train": 32, "infer": 32},
        gpu_types={"train": "h100", "infer": "h100"},
        what_if=tuple(parse_change(c) for c in changes),
    )


def window(trace, opts):
    """The window the gatherer hands its tasks (this trace has no recorded ends: the
    baseline's last end closes it)."""
    from slurmgpu.replay import build_model
    from slurmgpu.replay.engine import replay as run_engine

    return window_of(trace, run_engine(trace, build_model(opts), opts.config))


def same(a, b):
    """Equal as the JSON the report prints (NaN and tuples as JSON has them)."""
    return json.dumps(json_safe(a), sort_keys=True) == json.dumps(json_safe(b), sort_keys=True)


def test_trace_file_round_trip_keeps_every_column(tmp_path):
    trace = load_trace([DATA / "synthetic-mix.txt"])
    assert len(trace) > 5 and trace.recorded_runs is not None
    back = load_trace_file(save_trace(trace, tmp_path / "t.npz"))
    for name in ("partition", "qos", "tier", "submit_s", "duration_s", "timelimit_s", "gpus",
                 "kind", "mig_profile", "need_gpu", "need_mib", "gpu_equiv",
                 "recorded_start_s", "recorded_end_s", "recorded_preemptions"):  # fmt: skip
        np.testing.assert_array_equal(getattr(back, name), getattr(trace, name), err_msg=name)
    assert list(back.job_id) == list(trace.job_id)
    assert (back.partitions, back.qos_names, back.tier_names, back.profiles) == (
        trace.partitions, trace.qos_names, trace.tier_names, trace.profiles,
    )  # fmt: skip
    assert back.epoch_s == trace.epoch_s and back.skipped == trace.skipped
    for name in ("start_s", "end_s", "equiv", "partition", "preempted", "job"):
        np.testing.assert_array_equal(
            getattr(back.recorded_runs, name), getattr(trace.recorded_runs, name)
        )
    assert not list(tmp_path.glob(".*tmp"))  # no temp file left behind


def test_a_file_that_is_not_a_trace_is_one_clear_error(tmp_path):
    bad = tmp_path / "t.npz"
    bad.write_text("hello")
    with pytest.raises(UsageError, match="not a slurmgpu replay trace"):
        load_trace_file(bad)


def test_tasks_give_the_in_process_sweeps_numbers(tmp_path):
    trace, opts = history(), options(*CANDIDATES)
    expected = replay_trace(trace, opts)
    run = write_run(trace, opts, window(trace, opts), tmp_path / "work")
    assert run.parent == (tmp_path / "work").resolve() and (run / RESULTS).is_dir()
    for i in range(len(CANDIDATES)):
        # the hidden command a task runs, index from Slurm's environment
        res = CliRunner().invoke(main, ["replay-task", str(run)],
                                 env={"SLURM_ARRAY_TASK_ID": str(i)})  # fmt: skip
        assert res.exit_code == 0, res.output
    blocks = [read_result(run, i) for i in range(len(CANDIDATES))]
    assert [b.change for b in blocks] == list(CANDIDATES)
    for got, want in zip(blocks, expected.scenarios, strict=True):
        assert got == want or same(got.to_dict(), want.to_dict())
    # the moves really differ, or equality would prove little
    assert blocks[0].by_partition != expected.baseline.by_partition


def test_gather_reports_a_task_without_result_and_keeps_the_others(tmp_path):
    trace, opts = history(), options(*CANDIDATES[:2])
    expected = replay_trace(trace, opts)
    from slurmgpu.replay import build_model
    from slurmgpu.replay.engine import replay as run_engine

    model = build_model(opts)
    baseline = run_engine(trace, model, opts.config)
    window = window_of(trace, baseline)
    run = write_run(trace, opts, window, tmp_path)
    replay_task(run, 1)
    (run / LOGS / "0.out").write_text("starting\nslurmgpu: error: out of memory\n")
    # a host without sacct on PATH: the task's state cannot be read
    slurm = SlurmSweepOptions(poll_s=0.01, env={"PATH": str(tmp_path)})
    gpus = {p.name: p.total_gpus for p in model.partitions}
    result = _gather(trace, opts, baseline, window, gpus, run, "4242", slurm)
    assert same(result.report.to_dict()["baseline"], expected.to_dict()["baseline"])
    assert [s.change for s in result.report.scenarios] == [CANDIDATES[1]]
    [failed] = result.failed
    assert (failed.index, failed.change, failed.job_id) == (0, CANDIDATES[0], "4242_0")
    # no sacct answers here: the state is said to be unknown, not invented
    assert failed.state.startswith("unknown")
    message = failed.message()
    assert "4242_0" in message and CANDIDATES[0] in message
    assert "slurmgpu: error: out of memory" in message and "(log: " in message
    assert message.endswith("0.out)")
    (run / LOGS / "0.out").unlink()  # as seen from a host that does not share the workdir
    assert "is --workdir on a file system the nodes share?" in failed.message()


def test_task_errors_are_one_line(tmp_path):
    trace, opts = history(), options(CANDIDATES[0])
    run = write_run(trace, opts, window_of(trace, None), tmp_path)
    cases = [
        (["replay-task", str(run), "--index", "3"], "index 3 is not one of the run's 1"),
        (["replay-task", str(run)], "give --index, or run it as a Slurm array task"),
        (["replay-task", str(tmp_path / "nope"), "--index", "0"], "cannot read the sweep spec"),
    ]
    for args, says in cases:
        res = CliRunner().invoke(main, args, env={"SLURM_ARRAY_TASK_ID": ""})
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("slurmgpu: error: ") and says in res.output, res.output
        assert res.output.count("\n") == 1


def test_task_script_quotes_its_paths(tmp_path):
    run = tmp_path / "a dir"
    run.mkdir()
    script = write_script(run, "/opt/my venv/bin/python")
    text = script.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert f"exec '/opt/my venv/bin/python' -m slurmgpu replay-task '{run}'\n" in text
    assert script.stat().st_mode & 0o111


def test_via_slurm_cli_options_and_mistakes(tmp_path):
    base = ["replay", "--sacct-file", str(DATA / "synthetic-mix.txt"), "--capacity", "gpu=16",
            "--via-slurm", "--workdir", str(tmp_path)]  # fmt: skip
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 2
    assert res.output == (
        "slurmgpu: error: --via-slurm needs candidate changes (--sweep FILE or --what-if)\n"
    )
    res = CliRunner().invoke(main, [*base, "--what-if", "move:gpu:spare:12"])
    assert res.exit_code == 2 and "sum of whole nodes" in res.output
    assert not list(tmp_path.iterdir())  # nothing written, nothing submitted
    help_text = CliRunner().invoke(main, ["replay", "--help"]).output
    for option in ("--via-slurm", "--workdir", "--slurm-partition", "--slurm-time",
                   "--slurm-option", "--slurm-python"):  # fmt: skip
        assert option in help_text
    assert "replay-task" not in CliRunner().invoke(main, ["--help"]).output


def test_spec_carries_the_model_the_in_process_replay_uses(tmp_path):
    from slurmgpu.replay.cluster import QosSpec
    from slurmgpu.replay.engine import SchedConfig
    from slurmgpu.replay.sweep import _options_from_spec, _read_spec

    opts = ReplayOptions(
        capacity={"gpu": 16},
        gpus_per_node={"gpu": 4},
        gpu_types={"gpu": "a100"},
        qos=(QosSpec("hi", 100, ("lo",), 60, "requeue"), QosSpec("lo", 1)),
        baseline_changes=(parse_change("carve:gpu:4:3g.20gb=2"),),
        what_if=(parse_change("shard:gpu:4:4"),),
        config=SchedConfig(bf_interval_s=7, backfill=False),
    )
    run = write_run(history(), opts, window_of(history(), None), tmp_path)
    back = _options_from_spec(_read_spec(run), run)
    for name in ("capacity", "gpus_per_node", "gpu_types", "qos", "config"):
        assert getattr(back, name) == getattr(opts, name), name
    assert [format_change(c) for c in back.baseline_changes] == ["carve:gpu:4:3g.20gb=2"]
    assert [format_change(c) for c in back.what_if] == ["shard:gpu:4:4"]


def test_inventory_snapshots_travel_in_the_run_directory(tmp_path):
    from slurmgpu.replay import build_model
    from slurmgpu.replay.sweep import _options_from_spec, _read_spec

    examples = Path(__file__).resolve().parents[3] / "etc" / "examples"
    opts = ReplayOptions(
        capacity={"gpu": 16},
        inventories=(("mig", str(examples / "dgx-a100-mig.json")),),
        what_if=(parse_change("move:gpu:mig:8"),),
    )
    run = write_run(history(), opts, window_of(history(), None), tmp_path / "work")
    back = _options_from_spec(_read_spec(run), run)
    # the task reads the copy in the run directory, never the submitter's path
    assert [p for _, p in back.inventories] == [str(run / "inventory" / "0-dgx-a100-mig.json")]
    assert build_model(back) == build_model(opts)


def test_without_slurm_or_a_usable_workdir_it_is_one_line(tmp_path):
    base = ["replay", "--sacct-file", str(DATA / "synthetic-mix.txt"), "--capacity", "gpu=16",
            "--what-if", "move:gpu:spare:8", "--via-slurm"]  # fmt: skip
    a_file = tmp_path / "file"
    a_file.write_text("")
    res = CliRunner().invoke(main, [*base, "--workdir", str(a_file)])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "Invalid value for '--workdir'" in res.output
    res = CliRunner().invoke(main, [*base, "--workdir", str(a_file / "sub")])
    assert res.exit_code == 2, res.output
    assert res.output == f"slurmgpu: error: --workdir {a_file / 'sub'}: Not a directory\n"
    # a host without Slurm's commands: sbatch is missing, said in one line, exit 1
    res = CliRunner().invoke(main, [*base, "--workdir", str(tmp_path / "w")],
                             env={"PATH": str(tmp_path / "empty")})  # fmt: skip
    assert res.exit_code == 1, res.output
    assert res.output == "slurmgpu: error: sbatch: command not found\n"
    [run] = (tmp_path / "w").iterdir()
    assert {p.name for p in run.iterdir()} == {"spec.json", "trace.npz", "task.sh", "results",
                                              "logs"}  # fmt: skip


def test_slurm_options_without_via_slurm_are_refused(tmp_path):
    base = ["replay", "--sacct-file", str(DATA / "synthetic-mix.txt"), "--capacity", "gpu=16",
            "--what-if", "move:gpu:spare:8"]  # fmt: skip
    for args, says in [
        (["--slurm-partition", "cpu"], "--slurm-partition needs --via-slurm"),
        (["--slurm-option=--mem=1G"], "--slurm-option needs --via-slurm"),
        (["--workdir", str(tmp_path)], "--workdir needs --via-slurm"),
    ]:
        res = CliRunner().invoke(main, [*base, *args])
        assert res.exit_code == 2 and res.output == f"slurmgpu: error: {says}\n", res.output


def test_a_tier_change_of_an_unknown_qos_is_refused_before_anything_is_written(tmp_path):
    # the same check as the in-process replay (replay.check_changes), before any submission
    res = CliRunner().invoke(main, [
        "replay", "--sacct-file", str(DATA / "synthetic-mix.txt"), "--capacity", "gpu=16",
        "--what-if", "tier:nope:grace_s=60", "--via-slurm", "--workdir", str(tmp_path / "w"),
    ], env={"PATH": str(tmp_path / "empty")})  # fmt: skip
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "QOS 'nope' is neither in the policy nor in the dumps" in res.output
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())
