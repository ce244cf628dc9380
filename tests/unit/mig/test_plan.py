"""The planner: fewest GPUs carved, keep-whole, unmet demand, several nodes, measured demand."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from slurmgpu.cli import main
from slurmgpu.errors import UsageError
from slurmgpu.mig.demand import Demand, p95_concurrency, parse_demand, profile_for
from slurmgpu.mig.plan import plan
from slurmgpu.mig.preview import caps_minor, gi_id, planned_inventory
from slurmgpu.model.catalog import resolve
from slurmgpu.model.mig_layout import Placement
from slurmgpu.render import gres
from slurmgpu.views.mig import render_gres_preview, render_mig_parted, render_text
from tests.doubles.machines import EXAMPLES
from tests.unit.mig.conftest import node_of


def test_parse_demand() -> None:
    d = parse_demand(["1g.10gb=3", "3G=1", "1g.10gb=2"])
    assert d.items == (("1g.10gb", 5), ("3g", 1))
    for bad in ("1g.10gb", "x=1", "1g.10gb=-1", "1g.10gb=two"):
        with pytest.raises(UsageError, match="expected PROFILE=COUNT"):
            parse_demand([bad])
    with pytest.raises(UsageError, match="nothing asked"):
        parse_demand(["1g.10gb=0"])


def test_slice_size_means_the_smallest_profile_of_that_size() -> None:
    assert profile_for(resolve("a100"), "1g").name == "1g.5gb"
    assert profile_for(resolve("h100"), "1g").name == "1g.10gb"
    assert profile_for(resolve("a30"), "2g").name == "2g.12gb"
    assert profile_for(resolve("a30"), "3g") is None  # A30 has no 3g


def test_fewest_gpus_carved_meets_the_lower_bound() -> None:
    node = node_of("NVIDIA H100 80GB HBM3")
    # 10 x 1g + 2 x 3g = 16 compute slices: at least 3 GPUs of 7
    result = plan([node], parse_demand(["1g=10", "3g=2"]))
    assert result.met and result.lower_bound == 3 and result.carved == 3
    served = dict(result.served)
    assert served == {"1g": 10, "3g": 2}


def test_keep_whole_limits_carving_and_unmet_is_said() -> None:
    node = node_of("NVIDIA A100-SXM4-80GB")
    result = plan([node], parse_demand(["1g.10gb=20"]), keep_whole=6)
    assert result.carved == 2
    assert result.unmet == (("1g.10gb", 6),)
    whole = [g.gpu.index for g in result.nodes[0].gpus if g.layout is None]
    assert whole == [0, 1, 2, 3, 4, 5]  # the highest indices are carved, low ones stay whole
    text = render_text(result)
    assert "NOT MET: 1g.10gb=6" in text and "lower --keep-whole" in text


def test_demand_for_a_profile_no_node_has_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"1g\.5gb: no GPU .* offers it; profiles on offer"):
        plan([node_of("NVIDIA H100 80GB HBM3")], parse_demand(["1g.5gb=1"]))
    with pytest.raises(UsageError, match="no MIG-capable GPU"):
        plan([node_of("Tesla T4")], parse_demand(["1g=1"]))


def test_several_nodes_share_the_demand() -> None:
    a = node_of("NVIDIA H100 80GB HBM3", "gpu01")
    b = node_of("NVIDIA H100 80GB HBM3", "gpu02")
    result = plan([a, b], parse_demand(["7g=12"]), keep_whole=2)
    assert result.met and [n.carved for n in result.nodes] == [6, 6]
    with pytest.raises(UsageError, match="same node"):
        plan([a, a], parse_demand(["1g=1"]))


def test_a_gpu_that_already_has_the_layout_keeps_it(dgx_a100) -> None:
    result = plan([dgx_a100], parse_demand(["1g.5gb=7"]))
    gpu0 = result.nodes[0].gpus[0]
    assert gpu0.layout.label == "1g.5gb x7" and not gpu0.changes
    # the other MIG GPUs go back to whole: that is a change the plan shows
    assert result.nodes[0].gpus[1].layout is None and result.nodes[0].gpus[1].changes


def test_mig_parted_output_is_mig_parted_format(dgx_a100) -> None:
    result = plan([dgx_a100], parse_demand(["3g=2", "1g.5gb=4"]), keep_whole=6)
    doc = yaml.safe_load(render_mig_parted(result))
    assert doc["version"] == "v1"
    entries = doc["mig-configs"]["slurmgpu-dgxa100"]
    devices = sorted(d for e in entries for d in e["devices"])
    assert devices == list(range(8))  # every GPU stated
    carved = [e for e in entries if e["mig-enabled"]]
    total: dict[str, int] = {}
    for e in carved:
        for name, n in e["mig-devices"].items():
            total[name] = total.get(name, 0) + n * len(e["devices"])
    assert total.get("3g.20gb", 0) >= 2 and total.get("1g.5gb", 0) >= 4
    assert all("mig-devices" not in e for e in entries if not e["mig-enabled"])


def test_gres_preview_goes_through_gen_gres(dgx_a100) -> None:
    result = plan([dgx_a100], parse_demand(["1g.5gb=7"]), keep_whole=0)
    text = render_gres_preview(result, gres.GresOptions())
    assert "Gres=gpu:1g.5gb:7,gpu:a100:7" in text
    mig_lines = [line for line in text.splitlines() if "Type=1g.5gb" in line]
    assert len(mig_lines) == 7
    # GPU 0 keeps its 1g.5gb at slots 0-6: GI ids 7-13, caps minors by the driver's numbering
    assert "/dev/nvidia-caps/nvidia-cap" + str(3 + 9 * 7) in mig_lines[0]
    inv = planned_inventory(result.nodes[0])
    assert [g.mig_enabled for g in inv.gpus] == [True] + [False] * 7


def test_gi_ids_and_caps_minors() -> None:
    a100 = resolve("a100")
    assert gi_id(8, Placement(0, a100.profile("7g.40gb"))) == 0
    assert gi_id(8, Placement(4, a100.profile("3g.20gb"))) == 2
    assert gi_id(8, Placement(4, a100.profile("2g.10gb"))) == 5
    assert gi_id(8, Placement(6, a100.profile("1g.5gb"))) == 13
    assert gi_id(4, Placement(2, resolve("a30").profile("2g.12gb"))) == 2
    assert caps_minor("gpu0/gi0/access") == 3
    assert caps_minor("gpu1/gi2/ci0/access") == 3 + 135 + 18 + 1


def test_p95_concurrency() -> None:
    assert p95_concurrency([]) == 0
    # two overlap for 1 s of 100: the p95 level is 1
    spans = [(0, 100), (50, 51)]
    assert p95_concurrency(spans) == 1
    assert p95_concurrency([(0, 10), (0, 10), (0, 10)]) == 3


def test_measured_demand_from_sacct(dgx_a100) -> None:
    from slurmgpu.mig.demand import demand_from_sacct

    demand = demand_from_sacct(["tests/data/sacct/synthetic-mix.txt"], resolve("a100"))
    assert isinstance(demand, Demand) and demand.items
    assert "p95 concurrency" in demand.source
    result = plan([dgx_a100], demand)
    assert result.met


def test_cli_plan_text_and_errors(tmp_path) -> None:
    runner = CliRunner()
    snap = str(EXAMPLES / "dgx-a100-mig.json")
    ok = runner.invoke(main, ["mig", "plan", "--snapshot", snap, "--demand", "3g=2"])
    assert ok.exit_code == 0, ok.output
    assert "node dgxa100" in ok.output and "GPUs carved: 1" in ok.output
    out = tmp_path / "parted.yaml"
    to_file = [
        *("mig", "plan", "--snapshot-dir", str(EXAMPLES), "--demand", "1g=3"),
        *("--format", "mig-parted", "-o", str(out)),
    ]
    wrote = runner.invoke(main, to_file)
    assert wrote.exit_code == 3, wrote.output  # 3: the file was written (docs/acting.md)
    same = runner.invoke(main, to_file)
    assert same.exit_code == 0 and f"{out}: unchanged" in same.output, same.output
    assert set(yaml.safe_load(out.read_text())["mig-configs"]) == {
        "slurmgpu-dgxa100",
        "slurmgpu-dgxh100",
        "slurmgpu-mixed01",  # its RTX 4090s get a config; its NPUs and the AMD/Ascend nodes none
        "slurmgpu-pcie8",
    }
    bad = runner.invoke(main, ["mig", "plan", "--snapshot", snap, "--demand", "1g.99gb=1"])
    assert bad.exit_code == 2 and "slurmgpu: error: --demand 1g.99gb" in bad.output
    both = runner.invoke(main, ["mig", "plan", "--snapshot", snap])
    assert both.exit_code == 2 and "either as --demand" in both.output


def test_cli_plan_from_sacct_and_gres_preview() -> None:
    runner = CliRunner()
    snap = str(EXAMPLES / "dgx-a100-mig.json")
    measured = runner.invoke(
        main,
        ["mig", "plan", "--snapshot", snap, "--sacct-file", "tests/data/sacct/synthetic-mix.txt"],
    )
    assert measured.exit_code == 0, measured.output
    assert "p95 concurrency from tests/data/sacct/synthetic-mix.txt" in measured.output
    preview = runner.invoke(
        main,
        [
            *("mig", "plan", "--snapshot", snap, "--demand", "1g.5gb=7"),
            *("--format", "gres", "--slurm-version", "22.05.8"),
        ],
    )
    assert preview.exit_code == 0, preview.output
    assert "GresTypes=gpu" in preview.output and "AutoDetect=off" in preview.output


def test_cli_user_mistakes_are_one_line(tmp_path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff{}")
    snap = str(EXAMPLES / "dgx-a100-mig.json")
    cases = [
        (["--snapshot", str(bad), "--demand", "1g=1"], "not a snapshot"),
        (
            ["--snapshot", snap, "--demand", "1g=1", "-o", str(tmp_path / "no/dir/x")],
            "does not exist",
        ),
        (["--snapshot-dir", str(tmp_path / "none"), "--demand", "1g=1"], "not a directory"),
        (["--snapshot", snap, "--sacct-file", "x", "--gpu-model", "t4"], "not a MIG-capable"),
    ]
    for args, message in cases:
        result = runner.invoke(main, ["mig", "plan", *args])
        assert result.exit_code in (1, 2), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), args
        assert "slurmgpu: error:" in result.output and message in result.output, result.output


def test_exact_search_beats_the_greedy_where_it_can() -> None:
    # greedy alone carves 4 here (it fills GPUs with 2g first); 3 suffice:
    # 2g x3 + 1g, 2g x3 + 1g, 2g x2 + 1g x3 (8 x 2g, 5 x 1g)
    node = node_of("NVIDIA H100 80GB HBM3")
    result = plan([node], parse_demand(["2g.20gb=8", "1g.10gb=5"]))
    assert result.met and result.carved == 3 == result.lower_bound
    carved = [g.layout for g in result.nodes[0].gpus if g.layout]
    total: dict[str, int] = {}
    for lay in carved:
        for name, n in lay.counts.items():
            total[name] = total.get(name, 0) + n
    assert total["2g.20gb"] >= 8 and total["1g.10gb"] >= 5


def test_lower_bound_counts_instances_bigger_than_half_a_gpu() -> None:
    # 4g and 7g never share a GPU: 3 + 2 GPUs at least, though the slices would fit in 4
    result = plan([node_of("NVIDIA A100-SXM4-40GB")], parse_demand(["4g=3", "7g=2"]))
    assert result.lower_bound == 5 and result.carved == 5
