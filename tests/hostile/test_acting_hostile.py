"""Hostile acting state: journals a person (or an attacker) wrote by hand, locks held by
others. Each ends in one `slurmgpu: error:` line and nothing changed."""

from __future__ import annotations

import json

import pytest

from tests.hostile.conftest import assert_one_error, cli

NODE = "gpu01"


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SLURMGPU_LOCK_DIR", str(tmp_path / "locks"))


def _hand_made_journal(tmp_path, **over) -> dict:
    """A `mig apply` journal as a person would write it: valid fields, no checksum; its run
    "died" after write_gres, so a rollback would write its old gres.conf back."""
    journal = {
        "node": NODE,
        "config_name": "all-1g",
        "done": ["drain", "wait_jobs", "save_old", "stop_slurmd", "apply_layout", "inventory"],
        "state": "running",
        "old_layout": {"0": None},
        "old_gres_conf": "NodeName=gpu01 Name=gpu File=/dev/attacker\n",
        "error": "write_gres: killed",
        **over,
    }
    (tmp_path / f"mig-apply-{NODE}.json").write_text(json.dumps(journal))
    return journal


@pytest.mark.parametrize("check", [("--no-check",), ()])
def test_recover_never_acts_from_an_unsealed_hand_made_journal(tmp_path, check) -> None:
    _hand_made_journal(tmp_path)
    gres = tmp_path / "gres.conf"
    gres.write_text("NodeName=gpu01 Name=gpu File=/dev/nvidia0\n")
    run = cli(
        "mig", "apply", "--node", NODE, "--recover", *check,
        "--journal-dir", tmp_path, "--gres-conf", gres, "--config-file", tmp_path / "none.yaml",
        "--host-root", tmp_path, "--stop-slurmd", "false", "--start-slurmd", "false",
    )  # fmt: skip
    assert_one_error(run, says="no checksum; it cannot be trusted")
    assert gres.read_text() == "NodeName=gpu01 Name=gpu File=/dev/nvidia0\n"
    assert json.loads((tmp_path / f"mig-apply-{NODE}.json").read_text())["state"] == "running"


def test_a_hand_made_intent_in_the_rebalance_log_is_never_acted_on(tmp_path, monkeypatch) -> None:
    """An intent line without its checksum would make the next run "recover" partitions to
    the node lists it names: one error line, no scontrol run, the log as it was."""
    log = tmp_path / "rebalance.jsonl"
    line = {
        "time": "2026-01-01T10:00:00",
        "action": "intent",
        "moves": [{"node": "gpu03", "source": "infer", "target": "train", "reason": "x"}],
        "before": {"train": "gpu[01-02]", "infer": "gpu[03-04]"},
        "after": {"train": "gpu[01-03]", "infer": "gpu04"},
    }
    log.write_text(json.dumps(line) + "\n")
    calls = tmp_path / "calls"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bindir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    for extra in (("--transient",), ("--undo",)):
        run = cli("rebalance", "apply", *extra, "--log", log)
        assert_one_error(run, says=f"{log}:1: no checksum; it cannot be trusted")
    assert not calls.exists() and json.loads(log.read_text()) == line
