"""#33 config management: every generated file is byte-identical for the same inputs, whatever
path (relative, absolute, a symlink, a copy, $SLURMGPU_POLICY) or time they were given with,
and the commands exit by the one convention (0 unchanged, 3 changed, docs/acting.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.util.emit import EXIT_CHANGED, EXIT_UNCHANGED

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "tests" / "data" / "tiers" / "policy-module.toml"
SWITCHES = ROOT / "etc" / "examples" / "switches.toml"
GRES_LINES = "gpu01|gpu:h100:8(S:0-1),shard:32\natlas01|npu:910b:8(S:0-1)\n"


def run(*args: str, env: dict | None = None, cwd: Path | None = None):
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(main, [str(a) for a in args], env=env)
    finally:
        os.chdir(old)


def policy_paths(tmp_path: Path) -> list[tuple[list[str], dict, Path | None]]:
    """The one policy given five ways: absolute, relative, through a symlink, as a copy
    elsewhere, through $SLURMGPU_POLICY."""
    copy = tmp_path / "elsewhere" / "copy.toml"
    copy.parent.mkdir()
    shutil.copy(POLICY, copy)
    link = tmp_path / "link.toml"
    link.symlink_to(POLICY)
    return [
        (["--policy", str(POLICY)], {}, None),
        (["--policy", os.path.relpath(POLICY, tmp_path)], {}, tmp_path),
        (["--policy", str(link)], {}, None),
        (["--policy", str(copy)], {}, None),
        ([], {"SLURMGPU_POLICY": str(copy)}, None),
    ]


@pytest.mark.parametrize("module", [False, True])
def test_job_submit_lua_is_the_same_bytes_whatever_path(tmp_path, module):
    gres = [tmp_path / "a.txt", tmp_path / "deep" / "b.txt"]
    gres[1].parent.mkdir()
    for path in gres:
        path.write_text(GRES_LINES)
    texts = set()
    for i, (args, env, cwd) in enumerate(policy_paths(tmp_path)):
        extra = ["--module"] if module else []
        out = run("gen-job-submit", *args, *extra, "--slurm-version", "24.11",
                  "--accel-gres", gres[i % 2], env=env, cwd=cwd)  # fmt: skip
        assert out.exit_code == 0, out.output
        texts.add(out.stdout)
    assert len(texts) == 1
    (text,) = texts
    assert str(tmp_path) not in text and "policy-module" not in text and "a.txt" not in text


def test_topology_is_the_same_bytes_whatever_path(tmp_path):
    copy = tmp_path / "other-name.toml"
    shutil.copy(SWITCHES, copy)
    outs = []
    for spec in (SWITCHES, copy):
        out = run("gen-topology", "--switches", spec)
        assert out.exit_code == 0, out.output
        outs.append(out.stdout)
    assert outs[0] == outs[1] and "other-name" not in outs[1]


def test_gen_job_submit_exit_codes_tell_changed_from_unchanged(tmp_path):
    target = tmp_path / "job_submit.lua"
    args = ["gen-job-submit", "--policy", POLICY, "--slurm-version", "24.11", "-o", target]
    assert run(*args, "--diff").exit_code == EXIT_CHANGED  # would create it
    assert run(*args, "--dry-run").exit_code == EXIT_CHANGED and not target.exists()
    assert run(*args, "--emit", tmp_path / "e").exit_code == EXIT_CHANGED
    assert run(*args).exit_code == EXIT_CHANGED and target.exists()  # written
    for mode in ([], ["--diff"], ["--dry-run"], ["--emit", tmp_path / "f"]):
        assert run(*args, *mode).exit_code == EXIT_UNCHANGED, mode
    bad = run("gen-job-submit", "--policy", tmp_path / "missing.toml", "-o", target)
    assert bad.exit_code == 1 and bad.output.startswith("slurmgpu: error:")


def test_a_plays_second_run_changes_nothing(tmp_path):
    """What an Ansible play of these commands sees (changed_when: rc == 3): its first run
    changes every file, its second none, and --diff then agrees; install-units --diff too."""
    etc = tmp_path / "etc"
    etc.mkdir()
    env = {"SLURMGPU_POLICY": str(POLICY)}
    snapshot = ROOT / "etc" / "examples" / "dgx-h100.json"
    play = [
        ["gen-job-submit", "--slurm-version", "24.11", "-o", etc / "job_submit.lua"],
        ["gen-job-submit", "--module", "--slurm-version", "24.11", "-o", etc / "t.lua"],
        ["gen-gres", "--snapshot", snapshot, "--slurm-version", "24.11", "-o", etc / "gres.conf"],
        ["gen-topology", "--switches", SWITCHES, "--slurm-version", "24.11",
         "--output-dir", etc],
        ["install-units", "--prefix", tmp_path / "root", "--bin", "/usr/bin/slurmgpu"],
    ]  # fmt: skip
    first = [run(*task, env=env).exit_code for task in play]
    assert first == [EXIT_CHANGED] * len(play)
    second = [run(*task, env=env) for task in play]
    assert [r.exit_code for r in second] == [EXIT_UNCHANGED] * len(play), second[-1].output
    diffs = [run(*task, "--diff", env=env) for task in play]
    assert [(r.exit_code, r.stdout) for r in diffs] == [(EXIT_UNCHANGED, "")] * len(play)
    (tmp_path / "root" / "etc" / "logrotate.d" / "slurmgpu").write_text("edited\n")
    edited = run(*play[-1], "--diff", env=env)
    assert edited.exit_code == EXIT_CHANGED and "-edited" in edited.stdout
