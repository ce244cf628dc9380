"""`mig apply` on the real single-node test cluster: Slurm is real (scontrol, squeue,
slurmctld, slurmd), the GPUs are the pynvml double (a DGX A100 with MIG).

The node gpu01 starts as the recorded DGX A100 (3 MIG GPUs, 5 whole); a plan carves more;
`mig apply` drains the real node, stops and restarts the harness's slurmd, rewrites gres.conf
and the node line, reconfigures slurmctld, verifies and resumes; then a job runs on a new
slice. A failure injected in the NVML step leaves the node drained with the step in its
reason and the old files back. Not covered (needs the multi-node harness): another node
keeps running jobs meanwhile.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurmgpu.errors import ConfigCheckError
from slurmgpu.mig.apply import ApplyOptions, MigApply, MigApplyFailed
from slurmgpu.mig.demand import parse_demand
from slurmgpu.mig.plan import plan
from slurmgpu.render import gres
from slurmgpu.render.mig import render_mig_parted
from slurmgpu.sources import nvml
from slurmgpu.sources.slurm_node_control import SlurmNodeControl
from tests.doubles.machines import install_double, setup_machine
from tests.harness import SlurmCluster
from tests.harness.cluster import make_device_nodes, map_dev_paths, which

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm_only("host", reason="built and proven on the host's 22.05 only so far"),
]
NODE = "gpu01"


class HarnessNode(SlurmNodeControl):
    """The real scontrol/squeue; slurmd is the harness's process, and its gres.conf paths
    point at the harness's stand-in device nodes (as for every config the harness writes)."""

    def __init__(self, cluster: SlurmCluster) -> None:
        super().__init__(cluster.env)
        self.cluster = cluster

    def run_command(self, argv, timeout=120.0):
        if tuple(argv) == ("harness", "stop-slurmd"):
            self.cluster._daemons["slurmd"].stop()
        elif tuple(argv) == ("harness", "restart-slurmctld"):
            self.cluster.restart_slurmctld()
        elif tuple(argv) == ("harness", "start-slurmd"):
            conf = self.cluster.conf_dir / "gres.conf"
            text, devices = map_dev_paths(conf.read_text(), self.cluster.dev_dir)
            make_device_nodes(devices)
            conf.write_text(text)
            self.cluster._start("slurmd", [which("slurmd") or "slurmd", "-D", "-N", NODE])
        else:
            super().run_command(argv, timeout)


@pytest.fixture
def node(slurm_cluster, tmp_path, monkeypatch):
    double = install_double(monkeypatch)
    root = setup_machine(double, tmp_path, "dgx-a100-mig", change=lambda m: None)
    inv = nvml.read_inventory(root)
    opts = gres.GresOptions(node_name=NODE, node_hostname="localhost")
    text = gres.render_gres_conf(inv, opts, inventory_sha256="0" * 64)
    slurm_cluster.reconfigure(
        node_line=gres.node_line(inv, opts), gres_conf=text, extra_conf="GresTypes=gpu"
    )
    result = plan([inv], parse_demand(["1g.5gb=14", "2g=2"]), keep_whole=5)
    config = tmp_path / "plan.yaml"
    config.write_text(render_mig_parted(result).replace("slurmgpu-dgxa100", "relayout"))
    apply_opts = ApplyOptions(
        node=NODE,
        config_name="relayout",
        config_file=config,
        gres_conf=slurm_cluster.conf_dir / "gres.conf",
        slurm_conf=slurm_cluster.slurm_conf,
        journal_dir=tmp_path / "journal",
        host_root=str(root),
        drain_timeout_s=60,
        poll_s=1,
        stop_slurmd=("harness", "stop-slurmd"),
        start_slurmd=("harness", "start-slurmd"),
        mig_parted="",  # NVML, not mig-parted
        restart_slurmctld=("harness", "restart-slurmctld"),
        verify_timeout_s=60,
        env=slurm_cluster.env,
        gres_options=opts,
    )

    def validate(gres_text: str, node_line: str) -> None:
        check = slurm_cluster.validate_gres(gres_text, node_line)
        if not check.ok:
            raise ConfigCheckError("slurmd -G: " + " | ".join(check.errors[:3]))

    try:
        yield slurm_cluster, double, apply_opts, validate
    finally:
        slurm_cluster.reset()


def _gres(cluster: SlurmCluster) -> str:
    return re.search(r"\bGres=(\S+)", cluster.scontrol("show", "node", NODE)).group(1)


def test_apply_relayouts_the_node_and_mig_jobs_run(node) -> None:
    cluster, _double, opts, validate = node
    assert "gpu:1g.5gb:7" in _gres(cluster)
    journal = MigApply(opts, slurm=HarnessNode(cluster), validate_gres=validate).run()
    assert journal.state == "done"
    gres_now = _gres(cluster)
    small = int(re.search(r"gpu:1g\.5gb:(\d+)", gres_now).group(1))
    assert small >= 14 and "gpu:a100:5" in gres_now, gres_now  # 14 asked (+ spare slices)
    assert "3g.20gb" not in gres_now and "4g.20gb" not in gres_now, gres_now
    state = cluster.scontrol("show", "node", NODE)
    assert not re.search(r"State=\S*DRAIN", state), state
    script = "#!/bin/sh\necho CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\nsleep 1\n"
    jobid = cluster.sbatch("--gres=gpu:1g.5gb:9", script=script)  # more than the old 7
    assert cluster.wait_job_state(jobid, "COMPLETED", timeout=90) == "COMPLETED"


def test_a_failed_nvml_step_leaves_the_real_node_drained_with_old_config(node) -> None:
    cluster, double, opts, validate = node
    old_gres = opts.gres_conf.read_text()
    old_conf = opts.slurm_conf.read_text()
    path = Path(double._state["path"])
    machine = json.loads(path.read_text())
    machine["gpus"][0].setdefault("errors", {})["nvmlDeviceCreateGpuInstanceWithPlacement"] = (
        "once:INSUFFICIENT_RESOURCES"
    )
    path.write_text(json.dumps(machine))
    double.use_machine(path)
    with pytest.raises(MigApplyFailed, match="failed at apply_layout"):
        MigApply(opts, slurm=HarnessNode(cluster), validate_gres=validate).run()
    state = cluster.scontrol("show", "node", NODE)
    assert re.search(r"State=\S*DRAIN", state), state
    assert "failed at apply_layout" in state
    assert opts.gres_conf.read_text() == old_gres and opts.slurm_conf.read_text() == old_conf
    inv = nvml.read_inventory(opts.host_root)
    assert sorted(m.profile for m in inv.gpus[0].mig_devices) == ["1g.5gb"] * 7
