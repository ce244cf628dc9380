"""Still open from before issue #20: what the views and file readers did with hostile text.

- a `\\r` in a label made `report --format prom --output` fail its own validation;
- bidi controls (U+202E RIGHT-TO-LEFT OVERRIDE) reached text and HTML reports unisolated;
- a snapshot, policy or switch file starting with a UTF-8 byte order mark was refused;
- `policy check` joined every problem on one line, cut at 400 characters (a 4th never shown);
- `check` printed one line per GPU for one cause.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from slurmgpu.fleet.check import CheckReport
from slurmgpu.model.fleet import Problem
from slurmgpu.views.fleet_check import render_text as check_text
from tests.hostile.conftest import EXAMPLES, ROOT, assert_one_error, cli

SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
BOM = "\ufeff"
BIDI = "\u202e\u2066\u200f\u061c\u2028\u0085"


def _dump(tmp_path, *, partition: str = "gpu", user: str = "alice", account: str = "ml"):
    lines = SACCT.read_text(encoding="utf-8").split("\n")
    lines[1] = lines[1].replace("|c1|gpu|p1|ml|alice|", f"|c1|{partition}|p1|{account}|{user}|")
    path = tmp_path / "dump.txt"
    path.write_bytes("\n".join(lines).encode("utf-8"))
    return path


@pytest.mark.parametrize("label", ["g\rpu", "g\u2028pu", "g\u0085pu", 'g"p\\u', "g\u202epu"])
def test_a_label_with_a_carriage_return_or_line_separator_is_valid_prometheus(tmp_path, label):
    out = tmp_path / "r.prom"
    run = cli("report", "--sacct-file", _dump(tmp_path, partition=label), "--format", "prom",
              "--output", out)  # fmt: skip
    assert run.code == 0, run.stderr
    text = out.read_bytes().decode("utf-8")
    escaped = label.replace("\\", "\\\\").replace('"', '\\"')
    assert f'slurmgpu_partition_jobs{{partition="{escaped}"}} 1\n' in text
    if shutil.which("promtool") is None:
        pytest.fail("promtool (Debian's prometheus package) is needed: scripts/run-tests has it")
    checked = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                             capture_output=True, timeout=60, check=False)  # fmt: skip
    said = (checked.stdout + checked.stderr).decode()
    assert "parsing error" not in said, said  # lint notes (units, help) are not parse errors


@pytest.mark.parametrize(
    ("command", "fmt"), [("analyze", "text"), ("report", "text"), ("report", "html")]
)
def test_bidi_controls_from_the_input_are_shown_never_obeyed(tmp_path, command, fmt):
    dump = _dump(tmp_path, partition=f"gpu{BIDI}x", user=f"al{BIDI}ice", account=f"m{BIDI}l")
    run = cli(command, "--sacct-file", dump, "--format", fmt)
    assert run.code == 0, run.stderr
    assert not any(ch in run.stdout for ch in BIDI), [c for c in BIDI if c in run.stdout]
    assert "<U+202E>" in run.stdout


def test_replay_text_shows_bidi_controls(tmp_path):
    dump = _dump(tmp_path, partition=f"gpu{BIDI}x")
    run = cli("replay", "--sacct-file", dump, "--capacity", "gpu=16")
    assert run.code == 0, run.stderr
    assert not any(ch in run.stdout for ch in BIDI)
    # a --capacity partition name Slurm could not take is refused up front
    bad = cli("replay", "--sacct-file", dump, "--capacity", "gpu\u202ex=8")
    assert_one_error(bad, 2, says="partition name")


def test_a_snapshot_with_a_byte_order_mark_is_read_like_one_without(tmp_path):
    plain = EXAMPLES / "dgx-h100.json"
    marked = tmp_path / "bom.json"
    marked.write_text(BOM + plain.read_text(encoding="utf-8"), encoding="utf-8")
    args = ("--slurm-version", "22.05", "--node-line")
    with_bom = cli("gen-gres", "--snapshot", marked, *args)
    without = cli("gen-gres", "--snapshot", plain, *args)
    assert with_bom.code == 0, with_bom.stderr
    assert with_bom.stdout.replace(str(marked), "X") == without.stdout.replace(str(plain), "X")


def test_a_policy_and_a_switch_file_with_a_byte_order_mark_are_read(tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text(BOM + (ROOT / "etc" / "slurmgpu.toml").read_text(), encoding="utf-8")
    run = cli("policy", "check", "--policy", policy)
    assert run.code == 0, run.stderr
    switches = tmp_path / "s.toml"
    switches.write_text(BOM + (EXAMPLES / "switches.toml").read_text(), encoding="utf-8")
    run = cli("gen-topology", "--switches", switches, "--slurm-version", "22.05")
    assert run.code == 0, run.stderr


def test_policy_check_prints_every_problem_in_full_one_per_line(tmp_path):
    base = (ROOT / "etc" / "slurmgpu.toml").read_text()
    bad = tmp_path / "p.toml"
    long_user = "u" * 300
    # five problems, the first long enough that a 400-character line had no room for the rest
    bad.write_text(
        base
        + f'\n[tiers.X1]\npriority = -1\nqos = "q x"\nusers = ["{long_user} "]\n'
        + '[tiers.X2]\npriority = -2\nqos = "q,y"\n',
        encoding="utf-8",
    )
    run = cli("policy", "check", "--policy", bad)
    assert_one_error(run, 1, says="problems")
    listed = [ln for ln in run.stderr.splitlines() if ln.startswith("slurmgpu: policy: ")]
    count = int(run.stderr.split("the policy has ")[1].split()[0])
    assert len(listed) == count >= 4, run.stderr
    assert any(long_user in ln for ln in listed)  # never cut
    assert all(str(bad) in ln for ln in listed)


def test_check_prints_one_line_per_cause_with_the_details_under_it():
    nodes = tuple(f"gpu{i:02d}" for i in range(1, 23))
    mig = "MIG layout changed: Slurm has 7 x 1g.10gb, the GPUs now have 2 x 3g.40gb"
    problems = (
        *(Problem(n, "mig-layout-changed", mig, "regenerate gres.conf (gen-gres)") for n in nodes),
        Problem("gpu01", "xid", "GPU 2: Xid 48", "drain"),
        Problem("gpu01", "xid", "GPU 5: Xid 79", "drain"),
        Problem("gpu03", "persistence-off", "persistence mode off", "enable it", "warning"),
    )
    lines = check_text(CheckReport(nodes, problems)).splitlines()
    causes = [ln for ln in lines if not ln.startswith("  ") and not ln.startswith("slurmgpu")]
    assert causes == [
        "error: mig-layout-changed on 22 node(s) (gpu[01-22]): 22 finding(s); "
        "regenerate gres.conf (gen-gres)",
        "error: xid on 1 node(s) (gpu01): 2 finding(s); drain",
        "gpu03: warning: persistence mode off; enable it",
    ]
    details = [ln for ln in lines if ln.startswith("  ")]
    assert details == [
        "  gpu[01-22]: MIG layout changed: Slurm has 7 x 1g.10gb, the GPUs now have 2 x 3g.40gb",
        "  gpu01: GPU 2: Xid 48",
        "  gpu01: GPU 5: Xid 79",
    ]
    assert lines[-1] == "slurmgpu check: 24 error(s), 1 warning(s) on 22 node(s)"


def test_check_json_keeps_every_finding():
    from slurmgpu.views.fleet_check import render_json

    problems = tuple(Problem(f"n{i}", "xid", f"GPU {i}: Xid 48", "drain") for i in range(8))
    doc = json.loads(render_json(CheckReport(tuple(f"n{i}" for i in range(8)), problems)))
    assert len(doc["problems"]) == 8
