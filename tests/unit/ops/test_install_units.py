"""`slurmgpu install-units`: the kit with the installed command's path, checked by systemd's
own unit parser (`systemd-analyze verify`), sh, the CLI's option parser and a real logrotate
run; man pages and shell completion."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import HELP_OPTION_NAMES, main
from slurmgpu.errors import UsageError
from slurmgpu.ops.install import KIT, PLACEHOLDER, install_units, installed_executable
from tests.unit.tools import need

ROOT = Path(__file__).resolve().parents[3]
EXE = Path(sys.executable).parent / "slurmgpu"  # the test venv's own command


def invoke(*args: str, env: dict | None = None):
    # no site policy unless the test gives one (not this host's /etc/slurmgpu/slurmgpu.toml)
    with_env = {"SLURMGPU_POLICY": str(NO_POLICY), **(env or {})}
    return CliRunner().invoke(main, ["install-units", *args], env=with_env)


NO_POLICY = ROOT / "tests" / "data" / "tiers" / "policy-integration.toml"  # no [idle]/[autopilot]


@pytest.fixture
def staged(tmp_path) -> Path:
    out = invoke("--prefix", str(tmp_path), "--bin", str(EXE))
    assert out.exit_code == 3, out.output  # 3: written (docs/acting.md, exit codes)
    return tmp_path


def test_every_kit_file_is_installed_with_the_real_command(staged):
    assert installed_executable() == EXE  # beside the running interpreter (a venv's bin/)
    for item in KIT:
        path = staged / item.target
        text = path.read_text()
        assert PLACEHOLDER not in text and "/usr/local/bin/slurmgpu" not in text, item.target
        assert path.stat().st_mode & 0o777 == item.mode
    services = [staged / i.target for i in KIT if i.target.endswith(".service")]
    assert {p.name for p in services} == {
        f"slurmgpu-{n}.service"
        for n in ("collect", "report", "report-prom", "rebalance", "idle", "ingest", "autopilot")
    }
    for unit in services:  # a unit and a timer per timer-run command
        assert unit.with_suffix(".timer").is_file()
        execs = [ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart=")]
        assert execs and all(ln.startswith(f"ExecStart={EXE} ") for ln in execs), unit


def test_systemd_accepts_the_installed_units(staged):
    need("systemd-analyze")
    units = sorted(str(p) for p in (staged / "etc/systemd/system").iterdir())
    proc = subprocess.run(
        ["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    # and it does catch a unit whose command is missing
    bad = staged / "bad"
    invoke("--prefix", str(bad), "--bin", "/nonexistent/slurmgpu", "--only", "collect")
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(bad / "etc/systemd/system/slurmgpu-collect.service")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and "is not executable" in proc.stderr


def _commands(path: Path) -> list[list[str]]:
    """The slurmgpu argument lists a kit file runs (ExecStart lines, exec/command lines)."""
    argvs = []
    text = path.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip().removeprefix("ExecStart=").removeprefix("ExecStartPost=")
        line = line.removeprefix("exec ")
        if line.startswith(str(EXE)):
            argv = shlex.split(line.split(">", 1)[0].split("<", 1)[0])
            argvs.append([a.replace("%%", "%") for a in argv[1:]])
    return argvs


def test_every_command_in_the_kit_parses(staged):
    from slurmgpu.cli import SlurmgpuGroup

    seen = set()
    for item in KIT:
        for argv in _commands(staged / item.target):
            seen.add(argv[0])
            cmd = SlurmgpuGroup._load(argv[0])
            if argv[0] == "idle" and cmd is None:
                continue  # issue #23's command: the unit is ready before it lands
            assert cmd is not None, argv
            args = argv[1:]
            if isinstance(cmd, __import__("click").Group) and not args[0].startswith("-"):
                cmd, args = cmd.get_command(None, args[0]), args[1:]
            # raises on an unknown option or value (with the group's help options, as the
            # command line has them: click keeps a command's help option once made)
            cmd.make_context(argv[0], list(args), help_option_names=HELP_OPTION_NAMES)
    assert seen == {
        "collect",
        "report",
        "rebalance",
        "idle",
        "autopilot",
        "check",
        "ingest",
        "store",
    }


def test_health_wrapper_is_valid_sh(staged):
    wrapper = staged / "usr/local/sbin/slurmgpu-health"
    assert subprocess.run(["sh", "-n", str(wrapper)], check=False).returncode == 0
    assert _commands(wrapper) == [["check", "--health-check"]]


def test_logrotate_rotates_the_logs(staged, tmp_path):
    need("logrotate")
    conf = (staged / "etc/logrotate.d/slurmgpu").read_text()
    logs = tmp_path / "log"
    (logs / "slurmgpu").mkdir(parents=True)
    conf = conf.replace("/var/log/", f"{logs}/").replace("create 0640 root adm", "create 0640")
    (tmp_path / "lr.conf").write_text(conf)
    (logs / "slurmgpu-collect.log").write_text("epilog line\n")
    (logs / "slurmgpu" / "health.log").write_text("health line\n")
    proc = subprocess.run(
        ["logrotate", "-f", "-s", str(tmp_path / "state"), str(tmp_path / "lr.conf")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (logs / "slurmgpu-collect.log.1").read_text() == "epilog line\n"
    assert (logs / "slurmgpu" / "health.log.1").read_text() == "health line\n"
    assert (logs / "slurmgpu-collect.log").read_text() == ""  # created anew


def test_dry_run_writes_nothing_and_a_second_run_changes_nothing(tmp_path, staged):
    out = invoke("--prefix", str(tmp_path / "dry"), "--bin", str(EXE), "--dry-run")
    assert out.exit_code == 3 and not (tmp_path / "dry").exists()  # 3: would change
    assert f"ExecStart={EXE} collect --state" in out.output
    assert "next: slurm.conf: HealthCheckProgram=/usr/local/sbin/slurmgpu-health" in out.output
    again = invoke("--prefix", str(staged), "--bin", str(EXE))
    assert again.exit_code == 0  # unchanged
    assert "wrote" not in again.output and again.output.count("unchanged ") == len(KIT)


def _next(out) -> list[str]:
    return [ln for ln in out.output.splitlines() if ln.startswith("next: ")]


def test_next_enables_only_the_acting_timers_the_policy_turns_on(tmp_path):
    """#33: `next:` enabled slurmgpu-rebalance.timer (rebalance apply every 5 minutes, its
    moves undone at the next reconfigure) whatever the policy said. Now idle needs an [idle]
    table, autopilot an [autopilot] table, rebalance --only rebalance and no autopilot."""
    stage = ["--prefix", str(tmp_path), "--bin", str(EXE)]
    plain = invoke(*stage)  # tiers only: no acting timer
    [ctl] = [ln for ln in _next(plain) if "on the controller" in ln]
    assert ctl == ("next: on the controller: systemctl enable --now slurmgpu-report.timer "
                   "slurmgpu-report-prom.timer slurmgpu-ingest.timer")  # fmt: skip
    assert "note: slurmgpu-rebalance.timer is installed, not enabled" in plain.output
    example = tmp_path / "policy.toml"  # the shipped example ([idle]) with an [autopilot]
    example.write_text(
        (ROOT / "etc" / "slurmgpu.toml").read_text() + '\n[autopilot]\nmode = "apply"\n'
    )
    idle_only = invoke(*stage, "--policy", str(ROOT / "etc" / "slurmgpu.toml"))
    [ctl, idle] = [ln for ln in _next(idle_only) if "on the controller" in ln]
    assert "autopilot" not in ctl and "rebalance" not in ctl and "idle" not in ctl
    assert idle == (
        "next: on the controller: set the Prometheus URL and SMTP host in "
        "slurmgpu-idle.service, then systemctl enable --now slurmgpu-idle.timer"
    )
    assert "idle" not in "".join(_next(plain))  # no [idle] table: not suggested at all
    full = invoke(*stage, "--policy", str(example))
    [ctl, _] = [ln for ln in _next(full) if "on the controller" in ln]
    assert "slurmgpu-autopilot.timer" in ctl
    assert "slurmgpu-rebalance.timer" not in ctl
    assert "rebalance.timer is installed, not enabled: the autopilot moves nodes" in full.output
    alone = invoke(*stage, "--only", "rebalance")
    assert "next: on the controller: systemctl enable --now slurmgpu-rebalance.timer" in (
        _next(alone)
    )
    if not Path("/etc/slurmgpu/slurmgpu.toml").exists():  # no policy at all: none acts
        none = invoke(*stage, env={"SLURMGPU_POLICY": ""})
        assert "note: no site policy" in none.output
        assert not any(w in ln for ln in _next(none) for w in ("idle", "autopilot", "rebalance"))


def test_the_units_carry_the_policy_and_the_partitions_conf(tmp_path):
    """#33: the report units passed no --policy (QOS names instead of tiers); the rebalance
    unit no --partitions-conf (its moves lost at the next reconfigure)."""
    installed = install_units(tmp_path, executable=EXE, policy="/srv/site policy.toml")
    text = {i.path.name: i.text for i in installed}
    for name in ("slurmgpu-report.service", "slurmgpu-report-prom.service"):
        execs = [ln for ln in text[name].splitlines() if ln.startswith("ExecStart=")]
        assert execs and all(ln.endswith(" --policy /srv/site policy.toml") for ln in execs)
    assert (
        "--partitions-conf /etc/slurm/slurmgpu-partitions.conf"
        in (text["slurmgpu-rebalance.service"])
    )
    bare = install_units(tmp_path / "b", executable=EXE)
    execs = [ln for i in bare for ln in i.text.splitlines() if ln.startswith("ExecStart=")]
    assert not any("@" in ln or ln.endswith(" ") for ln in execs)


def test_the_light_install_gets_no_unit_that_needs_the_analysis_extra(tmp_path):
    installed = install_units(tmp_path, executable=EXE, analysis=False)
    names = {i.path.name for i in installed}
    assert "slurmgpu-collect.service" in names and "slurmgpu-idle.timer" in names
    assert not names & {"slurmgpu-report.service", "slurmgpu-ingest.service",
                        "slurmgpu-autopilot.service", "slurmgpu-report-prom.timer"}  # fmt: skip
    with pytest.raises(UsageError, match="--only report: needs the analysis extra"):
        install_units(tmp_path, executable=EXE, only=("report",), analysis=False)


def test_only_some_groups(tmp_path):
    installed = install_units(tmp_path, executable=EXE, only=("health", "logrotate"))
    assert sorted(p.path.name for p in installed) == ["slurmgpu", "slurmgpu-health"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bin", "venv/bin/slurmgpu"], "give an absolute path (systemd needs one)"),
        (["--bin", "/opt/my tools/slurmgpu"], "a path with blanks or % cannot go into"),
        (
            ["--only", "bogus"],
            "--only bogus: choose from collect, report, rebalance, idle, store, autopilot",
        ),
    ],
)
def test_bad_options_are_one_line(tmp_path, args, message):
    out = invoke("--prefix", str(tmp_path), *args)
    assert out.exit_code == 2
    assert out.stderr.startswith("slurmgpu: error: ") and message in out.stderr
    assert out.stderr.count("\n") == 1


def test_man_pages_match_the_commands():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make-man"), "--check"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (ROOT / "man" / "man1" / "slurmgpu-install-units.1").read_text()
    assert ".SH OPTIONS" in page and "\\-\\-bin PATH" in page


def test_shell_completion_knows_the_lazy_commands(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env |= {"_SLURMGPU_COMPLETE": "bash_complete", "COMP_WORDS": "slurmgpu gen-", "COMP_CWORD": "1"}
    proc = subprocess.run(
        [str(EXE)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert {"plain,gen-gres", "plain,gen-job-submit", "plain,gen-topology"} <= set(
        proc.stdout.split()
    )


# the commands that exit 3 when they changed something (docs/acting.md, "Exit codes")
CHANGED_IS_3 = {"rebalance", "autopilot", "gen-gres", "gen-topology", "gen-job-submit", "qos",
                "mig", "install-units"}  # fmt: skip


def _may_exit_3(argv: list[str]) -> bool:
    return argv[0] in CHANGED_IS_3 or (argv[0] == "idle" and "--live" in argv)


def test_a_unit_whose_command_exits_3_on_a_change_takes_3_as_success(staged):
    """A timer's unit must not show failed after a pass that changed something: every unit
    that runs such a command says SuccessExitStatus=3, no other unit does, and systemd's own
    parser reads it as an exit status (test_systemd_accepts_the_installed_units)."""
    seen = set()
    for item in KIT:
        if not item.target.endswith(".service"):
            continue
        path = staged / item.target
        lines = path.read_text().splitlines()
        success = [ln.split("=", 1)[1].split() for ln in lines if ln.startswith("SuccessExit")]
        if any(_may_exit_3(argv) for argv in _commands(path)):
            seen.add(path.name)
            assert success == [["3"]], path.name
        else:
            assert success == [], path.name
    assert seen == {f"slurmgpu-{n}.service" for n in ("rebalance", "autopilot", "idle")}
