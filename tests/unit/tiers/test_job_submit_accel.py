"""Routing across vendors in job_submit.lua: an `accel=mem>=SIZE` comment tag becomes the
--gres of the smallest fitting device, the same choice (or the same refusal) as
`slurmgpu submit --accel` (slurmgpu.model.accel) over the same cluster, in Lua 5.1 and 5.4."""

from __future__ import annotations

import pytest

from slurmgpu.errors import UsageError
from slurmgpu.model.accel import offers, parse_request, route_offers
from slurmgpu.model.slicing import NodeGres
from slurmgpu.render.job_submit import render_job_submit
from slurmgpu.sources.policy_file import load_policy
from slurmgpu.tiers.job_submit import accel_offers, gen_job_submit
from tests.unit.tiers.lua_env import EXAMPLE, SUCCESS, LuaScript

NODES = [
    NodeGres("dgx01", (("gpu", "h100", 8),)),
    NodeGres("dgx02", (("gpu", "3g.40gb", 2), ("gpu", "1g.10gb", 7))),
    NodeGres("atlas01", (("npu", "910b", 8),)),
    NodeGres("mi01", (("gpu", "mi300x_cpx", 64),)),
    NodeGres("mi02", (("gpu", "mi300x", 8),)),
    NodeGres("mixed01", (("gpu", "rtx4090", 4), ("npu", "910b4", 4))),
    NodeGres("shared01", (("gpu", "l40s", 2), ("shard", None, 8))),
]

# (kind or None, accel spec): inference defaults to npu|gpu-slice, training to linked-gpu,
# finetune has no classes, no kind is the policy's default kind (none in the example)
REQUESTS = [
    ("inference", "mem>=40G"),
    ("inference", "mem>=20G"),
    ("inference", "mem>=8G"),
    ("inference", "mem>=30G"),
    ("inference", "mem>=12000M"),
    ("inference", "mem>=20G,vendor=amd"),
    ("inference", "mem>=20G,vendor=nvidia"),
    ("inference", "mem>=70G"),
    ("inference", "mem>=11.5G,class=gpu-slice"),
    ("training", "mem>=300G"),
    ("training", "mem>=100G"),
    ("training", "mem>=20G"),
    ("training", "mem>=2T"),
    ("training", "mem>=500G,vendor=amd"),
    ("training", "mem>=700G,vendor=amd"),
    ("finetune", "mem>=20G"),
    ("finetune", "mem>=24G,class=gpu"),
    ("finetune", "mem>=60G,vendor=ascend"),
    ("finetune", "mem>=100G,vendor=ascend"),
    (None, "mem>=1"),
    (None, "mem>=40G,class=npu|gpu-slice"),
    (None, "mem>=20G,vendor=amd|ascend"),
    (None, "mem>=90G,class=gpu"),
    (None, "mem>=5T"),
]


def _python_choice(policy, kind: str | None, spec: str) -> tuple[str | None, str | None]:
    classes = policy.kind(kind).accel if kind else ()
    try:
        device = route_offers(offers(NODES, policy.shards_per_gpu), parse_request(spec, classes))
    except UsageError as exc:
        return None, str(exc)
    return device.gres, None


@pytest.fixture(scope="module")
def policy():
    return load_policy(EXAMPLE)


def _script(policy, runtime: str, table=None) -> LuaScript:
    table = offers(NODES, policy.shards_per_gpu) if table is None else table
    text = render_job_submit(policy, {}, (24, 11, 0), accel_offers=table, accel_source="test")
    return LuaScript(text, runtime)


def test_lua_and_the_wrapper_pick_the_same_device(policy, lua_runtime):
    script = _script(policy, lua_runtime)
    chosen = set()
    for kind, spec in REQUESTS:
        gres, why = _python_choice(policy, kind, spec)
        comment = (f"kind={kind} " if kind else "") + f"accel={spec}"
        out = script.submit({"comment": comment, "user_name": "alice"})
        if gres is None:
            assert out.rc != SUCCESS, (kind, spec, out.writes)
            assert out.user == [f"slurmgpu: {why}"], (kind, spec)
            assert "tres_per_node" not in out.writes
        else:
            assert out.rc == SUCCESS, (kind, spec, out.user, out.error)
            assert out.writes["tres_per_node"] == f"gres/{gres}", (kind, spec)
            assert out.writes["admin_comment"].endswith(f" accel={gres}")
            chosen.add(gres.split(":")[0] + ":" + gres.split(":")[1])
    # the table reaches every vendor and class: NPUs, MIG, AMD partitions, whole GPUs, shards
    assert {"npu:910b", "npu:910b4", "gpu:1g.10gb", "gpu:mi300x_cpx", "gpu:h100"} <= chosen
    assert any(g.startswith("shard:") for g in chosen) and "gpu:mi300x" in chosen


def test_the_table_routes_inference_to_an_npu_and_training_to_linked_gpus(policy, lua_runtime):
    script = _script(policy, lua_runtime)
    # 40 GB: 4 of the L40S's 12 GB shards (48 GB) are smaller than a 64 GB 910B
    out = script.submit({"comment": "kind=inference accel=mem>=40G"})
    assert out.writes["tres_per_node"] == "gres/shard:4"
    script = _script(policy, lua_runtime, offers(NODES[:-1], policy.shards_per_gpu))
    out = script.submit({"comment": "kind=inference accel=mem>=40G"})
    assert out.writes["tres_per_node"] == "gres/npu:910b:1"
    assert out.writes["partition"] == "gpu"  # the kind's other defaults still apply
    out = script.submit({"comment": "tier=P2,kind=training accel=mem>=300G"})
    assert out.writes["tres_per_node"] == "gres/gpu:h100:4"


def test_a_job_that_names_its_devices_is_left_alone(policy, lua_runtime):
    script = _script(policy, lua_runtime)
    for given in ("gres/npu:910b:2", "gres/gpu:h100:1", "gres/foo:1"):
        out = script.submit({"comment": "kind=inference accel=mem>=8G", "tres_per_node": given})
        assert out.rc == SUCCESS
        if given == "gres/foo:1":  # not an accelerator: the device is added beside it
            assert out.writes["tres_per_node"] == "gres/foo:1,gres/gpu:1g.10gb:1"
        else:
            assert "tres_per_node" not in out.writes, out.writes


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vendor=amd", "give the memory"),
        ("mem>=lots", "not a memory size"),
        ("mem>=10G,vendor=intel", "use mem>=SIZE"),
        ("mem>=10G,class=tpu", "use mem>=SIZE"),
        ("mem>=10.G", "not a memory size"),
    ],
)
def test_bad_specs_are_refused_by_both(policy, lua_runtime, spec, message):
    with pytest.raises(UsageError, match=message):
        parse_request(spec)
    out = _script(policy, lua_runtime).submit({"comment": f"accel={spec}"})
    assert out.rc != SUCCESS and message in out.user[0], out.user


def test_without_offers_an_accel_job_is_refused_and_others_pass(policy, lua_runtime):
    text = render_job_submit(policy, {}, (22, 5, 0))
    script = LuaScript(text, lua_runtime)
    out = script.submit({"comment": "accel=mem>=10G"})
    assert out.rc != SUCCESS and "--accel-gres" in out.user[0]
    out = script.submit({"comment": "kind=inference"})
    assert out.rc == SUCCESS and out.writes["tres_per_node"].startswith("gres:gpu:")
    # 22.05 spells the routed request gres:...
    text = render_job_submit(policy, {}, (22, 5, 0), accel_offers=offers(NODES[2:3]))
    routed = LuaScript(text, lua_runtime)
    out = routed.submit({"comment": "accel=mem>=40G"})
    assert out.writes["tres_per_node"] == "gres:npu:910b:1"


def test_offers_come_from_sinfo_lines_and_are_checked(policy, tmp_path):
    lines = tmp_path / "gres.txt"
    lines.write_text("atlas01|npu:910b:8(S:0-1)\nmi01|gpu:mi300x_cpx:64\ncpu01|(null)\n")
    table, where = accel_offers(str(lines), policy)
    assert [(o.name, o.gtype, o.sizing) for o in table] == [
        ("npu", "910b", "one"),
        ("gpu", "mi300x_cpx", "one"),
    ]
    assert where == "the GRES of 3 node(s)"  # no path: the same devices, the same bytes
    (tmp_path / "cpu.txt").write_text("cpu01|(null)\n")
    with pytest.raises(UsageError, match="no node offers"):
        accel_offers(str(tmp_path / "cpu.txt"), policy)
    out = tmp_path / "job_submit.lua"
    result = gen_job_submit(
        policy, str(out), check=True, slurm_version="24.11", accel_gres=str(lines)
    )
    assert result.status == 3, result.notes  # written (docs/acting.md, exit codes)
    assert 'gtype = "mi300x_cpx"' in out.read_text()


def test_whole_gpus_of_one_type_merge_to_the_largest_node():
    table = offers([NodeGres("a", (("gpu", "h100", 2),)), NodeGres("b", (("gpu", "h100", 8),))])
    assert [(o.gtype, o.max_count) for o in table] == [("h100", 8)]
