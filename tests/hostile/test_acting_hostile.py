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
