"""#33 config management inputs: device counts no node has in `--accel-gres`, an empty
`install-units --prefix`; each ends in one `slurmgpu: error:` line and writes nothing."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import ROOT, assert_one_error, cli

POLICY = ROOT / "tests" / "data" / "tiers" / "policy-module.toml"


@pytest.mark.parametrize(
    "line",
    [
        "n1|gpu:h100:100000000000000000000000",  # 1e23 GPUs rendered into the Lua before
        "n1|gpu:h100:65537(S:0-1)",
        "n1|gpu:h100:8,shard:99999999999",
        "n1|npu:910b:18446744073709551615",
    ],
)
def test_accel_gres_counts_no_node_has_are_one_error(tmp_path, line):
    lines = tmp_path / "gres.txt"
    lines.write_text(f"ok|gpu:h100:8\n{line}\n")
    out = tmp_path / "job_submit.lua"
    run = cli("gen-job-submit", "--policy", POLICY, "--accel-gres", lines, "-o", out)
    if "shard" in line or "npu" in line:
        # a shard count that big is no offer; an NPU gives one device: both render bounded
        assert run.code in (2, 3), run.stderr
        if run.code == 3:
            text = out.read_text()
            assert "99999999999" not in text and "18446744073709551615" not in text
        return
    assert_one_error(run, 2, says="more than 65536: not a real node's GRES")
    assert not out.exists()


@pytest.mark.parametrize("prefix", ["", " ", "\t"])
def test_install_units_refuses_an_empty_prefix(tmp_path, monkeypatch, prefix):
    monkeypatch.chdir(tmp_path)
    run = cli("install-units", "--prefix", prefix, "--bin", "/usr/bin/true")
    assert_one_error(run, 2, says="--prefix")
    assert list(tmp_path.iterdir()) == []  # nothing installed into the current directory
