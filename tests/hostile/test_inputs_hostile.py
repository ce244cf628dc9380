"""User inputs turned into numbers, files with a byte order mark or a column twice, spans that
would not fit in memory, shard runs the forecast cannot count (issue #33): each ends in a
correct result or one `slurmgpu: error:` line."""

from __future__ import annotations

import json

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.model.changes import parse_change
from slurmgpu.util.units import parse_size_mib
from tests.hostile.conftest import EXAMPLES, ROOT, assert_one_error, cli, proc

SNAPSHOT = EXAMPLES / "dgx-a100-mig.json"
SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
T0 = 1762128000  # 2025-11-03 00:00 UTC, a Monday
GOOD = "time,partition,gpus\n" + "".join(
    f"{T0 + 3600 * k},gpu,{10 + k % 24}\n" for k in range(24 * 10)
)

# What Python's int() / float() / str.isdigit() / a regex \d take and a user did not mean as
# a plain number: other scripts' digits (Arabic-Indic, Extended Arabic-Indic, Devanagari,
# Bengali, Thai, fullwidth), superscripts, underscores, signs, spaces, nan, inf, overflow.
NOT_NUMBERS = [
    "٣", "۳", "३", "৩", "๓", "３", "１２", "³", "²", "1_0", "+1", " 1", "1 ", "1e999", "nan",
    "inf", "-inf", "Infinity", "0x10", "1\n", "",
]  # fmt: skip
IDS = [ascii(x) for x in NOT_NUMBERS]


def _demand_file(tmp_path, text: str, name: str = "demand.csv", bom: bool = False):
    path = tmp_path / name
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


# ---------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("x", NOT_NUMBERS, ids=IDS)
def test_forecast_horizon_freq_since_take_ascii_digits_only(tmp_path, x):
    path = _demand_file(tmp_path, GOOD)
    run = cli("forecast", "--demand-file", path, "--horizon", f"{x}d")
    assert_one_error(run, 2, says="--horizon")
    run = cli("forecast", "--demand-file", path, "--freq", f"{x}h")
    assert_one_error(run, 2, says="--freq")
    if f"{x}d".strip() != "1d":  # `--since ' 1d'` is 1d: the option is stripped
        run = cli("forecast", "--demand-file", path, "--since", f"{x}d")
        assert_one_error(run, 2, says="--since")


@pytest.mark.parametrize("x", NOT_NUMBERS, ids=IDS)
def test_what_if_counts_take_ascii_digits_only(x):
    for template in (
        "move:short:gpu:{}",
        "carve:gpu:{}:1g.10gb=7",
        "carve:gpu:2:1g.10gb={}",
        "shard:gpu:{}:4",
        "tier:p1:priority={}",
        "tier:p1:grace_s={}",
    ):
        change = template.format(x)
        if change.strip() == template.format("1"):  # the change string is stripped
            assert parse_change(change).format() == change.strip()
            continue
        with pytest.raises(UsageError, match=r"ASCII digits|not PROFILE=COUNT|is not"):
            parse_change(change)


def test_what_if_on_the_command_line_names_the_value():
    run = cli("replay", "--sacct-file", SACCT, "--what-if", "move:short:gpu:٨")
    assert_one_error(run, 2, says="'٨'")
    with pytest.raises(UsageError, match="from 1 to"):
        parse_change("move:a:b:99999999999999999999")
    assert parse_change("move:a:b:8").gpus == 8


@pytest.mark.parametrize("x", NOT_NUMBERS, ids=IDS)
def test_mig_plan_demand_takes_ascii_digits_only(x):
    for template in ("1g.10gb={}", "{}g=1"):
        item = template.format(x)
        run = cli("mig", "plan", "--snapshot", SNAPSHOT, "--demand", item)
        if item.strip(" \t") == template.format("1"):  # the item is stripped
            assert run.code == 0 and f"demand {template.format(1)}" in run.stdout, run.stderr
        else:
            assert_one_error(run, 2, says="--demand")


def test_mig_plan_demand_ascii_still_plans():
    run = cli("mig", "plan", "--snapshot", SNAPSHOT, "--demand", "1g.10gb=3")
    assert run.code == 0, run.stderr
    assert "demand 1g.10gb=3" in run.stdout


# spaces around a CSV field (or a line end after it) are the same value: covered below
NOT_CSV_NUMBERS = [x for x in NOT_NUMBERS if x.strip() != "1"]


@pytest.mark.parametrize("x", NOT_CSV_NUMBERS, ids=[ascii(x) for x in NOT_CSV_NUMBERS])
def test_demand_file_values_take_ascii_digits_only(tmp_path, x):
    body = GOOD.replace(f"{T0 + 3600},gpu,11\n", f"{T0 + 3600},gpu,{x}\n")
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, body))
    assert_one_error(run, 1, says="line 3: gpus")
    if x:
        body = GOOD.replace(f"{T0 + 3600},gpu,11\n", f"{x}{T0 + 3600},gpu,11\n")
        run = cli("forecast", "--demand-file", _demand_file(tmp_path, body))
        assert_one_error(run, 1, says="line 3: time")


def test_demand_file_spaces_around_a_field_are_the_same_value(tmp_path):
    plain = cli("forecast", "--demand-file", _demand_file(tmp_path, GOOD), "--format", "json")
    spaced = GOOD.replace(f"{T0 + 3600},gpu,11\n", f" {T0 + 3600} , gpu , 11 \n")
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, spaced, "s.csv"),
              "--format", "json")  # fmt: skip
    assert run.code == 0 and plain.code == 0, run.stderr
    assert json.loads(run.stdout) == json.loads(plain.stdout)


def test_demand_file_decimal_comma_is_refused_not_truncated(tmp_path):
    body = GOOD.replace(f"{T0 + 3600},gpu,11\n", f"{T0 + 3600},gpu,11,5\n")
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, body))
    assert_one_error(run, 1, says="line 3: 4 fields")


@pytest.mark.parametrize("x", ["٣", "３", "1_0", "+1", "1e3", "nan", "²"], ids=ascii)
def test_sizes_and_accel_counts_take_ascii_digits_only(tmp_path, x):
    with pytest.raises(ValueError, match="not a memory size"):
        parse_size_mib(f"{x}G")
    run = cli("analyze", "--sacct-file", SACCT, "--gpu-memory", f"t4={x}G")
    assert_one_error(run, 2, says="--gpu-memory")
    run = cli("analyze", "--sacct-file", SACCT, "--accel-capacity", f"npu:910b={x}")
    assert_one_error(run, 2, says="--accel-capacity")
    run = cli("analyze", "--sacct-file", SACCT, "--shards-per-gpu", f"gpu={x}")
    assert_one_error(run, 2, says="--shards-per-gpu")


@pytest.mark.parametrize("x", ["٣", "３", "1_0", "+1", "nan", "inf", "1e999", " 1"], ids=ascii)
def test_click_number_options_take_ascii_digits_only(x):
    run = cli("forecast", "--chunk-hours", x, "--sacct-file", SACCT)
    assert_one_error(run, 2, says="--chunk-hours")
    run = cli("mig", "plan", "--snapshot", SNAPSHOT, "--demand", "3g=1", "--keep-whole", x)
    assert_one_error(run, 2, says="--keep-whole")


# ---------------------------------------------------------------------------- BOM


def test_demand_file_with_a_byte_order_mark_reads_as_without(tmp_path):
    plain = cli("forecast", "--demand-file", _demand_file(tmp_path, GOOD), "--format", "json")
    bom = _demand_file(tmp_path, GOOD, "bom.csv", bom=True)
    run = cli("forecast", "--demand-file", bom, "--format", "json")
    assert run.code == 0 and plain.code == 0, run.stderr
    assert json.loads(run.stdout) == json.loads(plain.stdout)


def _jobidraw_only_dump() -> str:
    """synthetic-mix.txt without its JobID column: JobIDRaw is then the header's first name."""
    lines = SACCT.read_text().splitlines()
    return "\n".join(line.split("|", 2)[0] + "|" + line.split("|", 2)[2] for line in lines) + "\n"


def test_dump_with_a_byte_order_mark_and_only_jobidraw_reads_as_without(tmp_path):
    text = _jobidraw_only_dump()
    assert text.startswith("JobIDRaw|Cluster|")
    plain, bom = tmp_path / "plain.txt", tmp_path / "bom.txt"
    plain.write_text(text)
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    want = cli("analyze", "--sacct-file", plain, "--format", "json")
    run = cli("analyze", "--sacct-file", bom, "--format", "json")
    assert run.code == 0 and want.code == 0, run.stderr
    got, exp = json.loads(run.stdout), json.loads(want.stdout)
    assert got["totals"]["rows_analyzed"] == exp["totals"]["rows_analyzed"] > 0
    assert got["totals"]["rows_rejected"] == exp["totals"]["rows_rejected"]


def test_snapshot_with_a_byte_order_mark_plans_as_without(tmp_path):
    bom = tmp_path / "node.json"
    bom.write_bytes(b"\xef\xbb\xbf" + SNAPSHOT.read_bytes())
    want = cli("mig", "plan", "--snapshot", SNAPSHOT, "--demand", "1g.10gb=3")
    run = cli("mig", "plan", "--snapshot", bom, "--demand", "1g.10gb=3")
    assert run.code == 0 and want.code == 0, run.stderr
    assert run.stdout == want.stdout


# ---------------------------------------------------------------------------- columns twice


@pytest.mark.parametrize(
    "header",
    ["time,partition,gpus,gpus", "time,partition,gpus,Time", "time,partition,gpus, partition "],
)
def test_demand_file_column_twice_is_refused_naming_it(tmp_path, header):
    body = header + "\n" + "".join(f"{T0 + 3600 * k},gpu,3,4\n" for k in range(240))
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, body))
    twice = header.rsplit(",", 1)[1].strip().lower()
    assert_one_error(run, 1, says=f"column '{twice}' appears twice")


def test_dump_column_twice_is_refused_naming_it(tmp_path):
    lines = SACCT.read_text().splitlines()
    path = tmp_path / "dup.txt"
    path.write_text("\n".join([lines[0] + "|partition"] + [x + "|gpu" for x in lines[1:]]) + "\n")
    run = cli("analyze", "--sacct-file", path)
    assert_one_error(run, 1, says="column Partition appears twice")


# ---------------------------------------------------------------------------- memory bound


def test_a_year_at_one_minute_is_refused_with_a_freq_that_fits(tmp_path):
    body = "time,partition,gpus\n2024-01-01T00:00:00Z,gpu,3\n2025-01-01T00:00:00Z,gpu,4\n"
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, body), "--freq", "1m")
    msg = assert_one_error(run, 2, says="--freq 1m")
    assert "366 days" in msg and "MiB" in msg
    from slurmgpu.forecast import budget

    coarser = msg.split("use --freq ")[1].split()[0]
    f = budget.FREQS[[budget.freq_text(x) for x in budget.FREQS].index(coarser)]
    assert budget.need_bytes(367 * 1440 * 60 // f, 7 * 86400 // f, 1, f) <= budget.MAX_BYTES
    finer = budget.FREQS[budget.FREQS.index(f) - 1]
    assert budget.need_bytes(367 * 86400 // finer, 7 * 86400 // finer, 1, finer) > (
        budget.MAX_BYTES
    )


def test_a_century_at_one_hour_is_refused(tmp_path):
    body = "time,partition,gpus\n1970-01-01T00:00:00Z,gpu,3\n2070-01-01T00:00:00Z,gpu,4\n"
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, body), "--freq", "1h")
    assert_one_error(run, 2, says="--freq 2h")
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, body), "--freq", "1d",
              "--since", "1970-01-01", "--train-until", "2070-01-01")  # fmt: skip
    assert "slurmgpu: error" not in run.stderr or "too little" in run.stderr


def test_millennia_at_one_day_say_to_shorten_the_history(tmp_path):
    body = "time,partition,gpus\n1970-01-01T00:00:00Z,gpu,3\n9990-01-01T00:00:00Z,gpu,4\n"
    run = cli("forecast", "--demand-file", _demand_file(tmp_path, body), "--freq", "1d")
    assert_one_error(run, 2, says="shorter history")


def test_a_dump_a_year_long_at_one_minute_is_refused(tmp_path):
    head = "JobIDRaw|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES\n"
    row = "{}|gpu|normal|alice|{}|{}|{}|3600|COMPLETED|cpu=8,gres/gpu=2,node=1\n"
    t1 = T0 + 365 * 86400
    path = tmp_path / "year.txt"
    path.write_text(head + row.format(1, T0, T0, T0 + 3600) + row.format(2, t1, t1, t1 + 3600))
    run = cli("forecast", "--sacct-file", path, "--freq", "1m")
    msg = assert_one_error(run, 2, says="the history spans 365 days: at --freq 1m")
    assert "use --freq " in msg


# ---------------------------------------------------------------------------- shards


def _shard_dump(tmp_path):
    """Three days of hourly jobs: whole GPUs in `gpu`, gres/shard in `shared`."""
    head = "JobIDRaw|Partition|QOS|User|Submit|Start|End|ElapsedRaw|State|AllocTRES\n"
    rows = []
    for k in range(72):
        t = T0 + 3600 * k
        tres = "cpu=1,gres/gpu=1,node=1"
        rows.append(f"{2 * k + 1}|gpu|normal|alice|{t}|{t}|{t + 3000}|3000|COMPLETED|{tres}")
        tres = "cpu=1,gres/shard=2,node=1"
        rows.append(f"{2 * k + 2}|shared|normal|bob|{t}|{t}|{t + 3000}|3000|COMPLETED|{tres}")
    path = tmp_path / "shards.txt"
    path.write_text(head + "\n".join(rows) + "\n")
    return path


def test_forecast_says_when_a_shard_partition_cannot_be_counted(tmp_path):
    path = _shard_dump(tmp_path)
    run = cli("forecast", "--sacct-file", path, "--horizon", "6h", "--format", "json")
    assert run.code == 0, run.stderr
    warned = [x for x in run.stderr.splitlines() if x.startswith("slurmgpu: warning:")]
    assert len(warned) == 1 and "shared" in warned[0] and "--shards-per-gpu shared=" in warned[0]
    doc = json.loads(run.stdout)
    assert [p["partition"] for p in doc["by_partition"]] == ["gpu"]
    assert any("--shards-per-gpu shared=" in n for n in doc["notes"])
    run = cli("forecast", "--sacct-file", path, "--horizon", "6h", "--format", "json",
              "--shards-per-gpu", "shared=4")  # fmt: skip
    assert run.code == 0 and "warning" not in run.stderr, run.stderr
    doc = json.loads(run.stdout)
    assert [p["partition"] for p in doc["by_partition"]] == ["gpu", "shared"]


# ---------------------------------------------------------------------------- more options


@pytest.mark.parametrize("x", ["٢٤.٠٥", "２４.05", "24_0.05", "+24.05", "24.0٥"], ids=ascii)
def test_slurm_versions_take_ascii_digits_only(x):
    run = cli("analyze", "--sacct-file", SACCT, "--slurm-version", x)
    assert_one_error(run, 2, says="Slurm version")
    run = cli("mig", "plan", "--snapshot", SNAPSHOT, "--demand", "3g=1", "--format", "gres",
              "--slurm-version", x)  # fmt: skip
    assert_one_error(run, 2, says="Slurm version")


@pytest.mark.parametrize("x", ["٣", "²", "３", "1_0", "+1"], ids=ascii)
def test_rebalance_floor_for_takes_ascii_digits_only(x):
    assert_one_error(cli("rebalance", "plan", "--floor-for", f"gpu={x}"), 2, says="--floor-for")


@pytest.mark.parametrize("x", ["٣", "²", "３", "1_0", "+1", " 1 2"], ids=ascii)
def test_replay_slurm_conf_numbers_take_ascii_digits_only(x):
    from slurmgpu.replay.slurm_config import parse_slurm_conf, sched_config

    for text in (
        f"PriorityWeightQOS={x}",
        f"SchedulerParameters=bf_window={x}",
        f"AuthInfo=auth/munge,cred_expire={x}",
        f"PriorityMaxAge={x}-0",
    ):
        with pytest.raises(UsageError):
            sched_config(parse_slurm_conf(text))


def test_replay_slurm_conf_with_a_byte_order_mark_reads_its_first_key():
    from slurmgpu.replay.slurm_config import parse_slurm_conf, sched_config

    plain = sched_config(parse_slurm_conf("PriorityWeightQOS=7000\n"))
    assert sched_config(parse_slurm_conf("\ufeffPriorityWeightQOS=7000\n")) == plain
    assert plain.priority_weight_qos == 7000


def test_json_dump_key_twice_is_refused_naming_it(tmp_path):
    dump = ROOT / "tests" / "data" / "sacct" / "slurm-24.11-harness.json"
    data = dump.read_bytes()
    assert data.count(b'"partition":') > 1
    path = tmp_path / "dup.json"
    path.write_bytes(data.replace(b'"partition":', b'"partition": "other", "partition":', 1))
    run = cli("analyze", "--sacct-file", path)
    assert_one_error(run, 1, says="key 'partition' appears twice")
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + data)
    want = cli("analyze", "--sacct-file", dump, "--format", "json")
    run = cli("analyze", "--sacct-file", bom, "--format", "json")
    assert run.code == 0 and want.code == 0, run.stderr
    assert json.loads(run.stdout)["totals"] == json.loads(want.stdout)["totals"]


# ---------------------------------------------------------------------------- endless input


@pytest.mark.parametrize("option", ["--sacct-file", "--demand-file"])
def test_devices_and_fifos_are_refused_not_read_without_end(tmp_path, option):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    command = "analyze" if option == "--sacct-file" else "forecast"
    for path in ("/dev/zero", fifo):
        run = proc(command, option, path, timeout=60)
        assert_one_error(run, 1, says="not a regular file")


@pytest.mark.parametrize("option", ["--sacct-file", "--demand-file"])
def test_a_file_without_line_ends_is_refused_early(tmp_path, option):
    path = tmp_path / "one-line"
    with open(path, "wb") as fh:
        for _ in range(80):
            fh.write(b"x" * 2**20)
    command = "analyze" if option == "--sacct-file" else "forecast"
    run = cli(command, option, path)
    assert_one_error(run, 1, says="longer than")


def test_idle_what_if_file_with_a_byte_order_mark_reads_as_without(tmp_path):
    from slurmgpu.replay.idle_reclaim import read_cuts

    doc = {"jobs": [{"job": "7", "start": "2025-11-03T00:00:00Z",
                     "action_at": "2025-11-03T02:00:00Z"}]}  # fmt: skip
    plain, bom = tmp_path / "idle.json", tmp_path / "bom.json"
    plain.write_text(json.dumps(doc))
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    assert read_cuts(str(bom)) == read_cuts(str(plain))
    assert read_cuts(str(plain))[0].action_s - read_cuts(str(plain))[0].start_s == 7200


def test_demand_file_gpus_beyond_any_cluster_are_refused(tmp_path):
    for x in ("1e300", "1e8", "99999999999"):
        body = GOOD.replace(f"{T0 + 3600},gpu,11\n", f"{T0 + 3600},gpu,{x}\n")
        run = cli("forecast", "--demand-file", _demand_file(tmp_path, body))
        assert_one_error(run, 1, says="line 3: gpus")


@pytest.mark.parametrize(
    "value", ["Infinity", "-Infinity", "NaN", "1e400", '"٣"', '"１７９６３２３６００"', "true"]
)
def test_json_dump_times_not_numbers_reject_their_row(tmp_path, value):
    dump = ROOT / "tests" / "data" / "sacct" / "slurm-24.11-harness.json"
    text = dump.read_text()
    first = '"submission": 1796323600'
    assert first in text
    path = tmp_path / "bad.json"
    path.write_text(text.replace(first, f'"submission": {value}', 1))
    want = json.loads(cli("analyze", "--sacct-file", dump, "--format", "json").stdout)
    run = cli("analyze", "--sacct-file", path, "--format", "json")
    assert run.code == 0, run.stderr
    got = json.loads(run.stdout)["totals"]
    assert got["rows_rejected"] == want["totals"]["rows_rejected"] + 1
    assert got["rejected_reasons"] == {"bad Submit time": 1}


def test_sweep_file_with_a_byte_order_mark_reads_as_without(tmp_path):
    from slurmgpu.replay import read_sweep

    text = "# two moves\nmove:short:gpu:8\nmove:gpu:short:4\n"
    plain, bom = tmp_path / "sweep.txt", tmp_path / "bom.txt"
    plain.write_text(text)
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert read_sweep(bom) == read_sweep(plain) and len(read_sweep(plain)) == 2
    bom.write_bytes(b"\xef\xbb\xbfmove:short:gpu:8\n")  # the BOM before a change, not a comment
    assert read_sweep(bom) == read_sweep(plain)[:1]
    bad = tmp_path / "bad.txt"
    bad.write_text("move:short:gpu:٨\n")
    with pytest.raises(UsageError, match=r"bad\.txt:1: .*'٨'"):
        read_sweep(bad)


@pytest.mark.parametrize("size", ["٣G", "１６G", "1_6G", "+16G", "nan", "inf"], ids=ascii)
def test_policy_gpu_memory_sizes_take_ascii_digits_only(tmp_path, size):
    policy = tmp_path / "policy.toml"
    base = (ROOT / "etc" / "slurmgpu.toml").read_text()
    policy.write_text(base + f'\n[gpu_memory]\nt4 = "{size}"\n')
    run = cli("analyze", "--sacct-file", SACCT, "--policy", policy)
    assert_one_error(run, 1, says="policy")
    assert "gpu_memory.t4: not a memory size" in run.stderr
    policy.write_text(base + '\n[gpu_memory]\nt4 = "16G"\n')
    assert cli("analyze", "--sacct-file", SACCT, "--policy", policy).code == 0
