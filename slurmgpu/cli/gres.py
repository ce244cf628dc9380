"""`slurmgpu inventory` and `slurmgpu gen-gres`: thin click wiring over sources/ and render/.

Only click and the standard library at import time; pynvml, jinja2 and the renderers load
inside the commands.
"""

from __future__ import annotations

import click

from slurmgpu.cli.emit_options import emit_options, exit_with
from slurmgpu.errors import UsageError
from slurmgpu.util import strict


def _warn(message: str, *, loud: bool = False) -> None:
    prefix = "slurmgpu: WARNING: " if loud else "slurmgpu: warning: "
    click.secho(prefix + message, err=True, fg="red" if loud else "yellow", bold=loud)


@click.command()
@click.option(
    "--host-root",
    default="/",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Read /sys, /proc and /dev under this directory (a recorded tree, off-node).",
)
@click.option(
    "--output", "-o", default="-", show_default=True, help="Snapshot file, or - for stdout."
)
@click.option(
    "--allow-partial", is_flag=True, help="Record the healthy GPUs when some GPU fails (loudly)."
)
@click.option(
    "--vendor",
    "vendor",
    default="auto",
    show_default=True,
    help="auto (every vendor present), or a list of nvidia, amd, ascend (docs/vendors.md).",
)
@click.option("--nodes", help="Inventory these nodes (hostlist) through srun (docs/fleet.md).")
@click.option(
    "--output-dir", type=click.Path(file_okay=False), help="With --nodes: NODE.json here."
)
@click.option(
    "--remote-command",
    default="slurmgpu",
    show_default=True,
    help="With --nodes: slurmgpu's path on the nodes.",
)
@click.option("--srun-arg", "srun_args", multiple=True, help="With --nodes: extra srun argument.")
def inventory(
    host_root: str,
    output: str,
    allow_partial: bool,
    vendor: str,
    nodes: str | None,
    output_dir: str | None,
    remote_command: str,
    srun_args: tuple[str, ...],
) -> None:
    """Read the accelerators (NVML, amdsmi, DCMI/npu-smi) and the host into a versioned JSON
    snapshot (see docs/snapshot.md, docs/vendors.md)."""
    from slurmgpu.sources import accelerators, snapshot
    from slurmgpu.util.atomic import write_atomic

    if nodes or output_dir:
        from slurmgpu.cli.fleet import inventory_nodes

        inventory_nodes(nodes, output_dir, host_root, remote_command, srun_args)
        return

    inv = accelerators.read_inventory(
        host_root, allow_partial=allow_partial, vendors=accelerators.parse_vendors(vendor)
    )
    for warning in inv.warnings:
        _warn(warning, loud=warning.startswith("left out") or "caps minor" in warning)
    if inv.partial:
        _warn(f"PARTIAL inventory: {len(inv.skipped_gpus)} GPU(s) left out", loud=True)
    text = snapshot.dumps(inv)
    if output == "-":
        click.echo(text, nl=False)
    else:
        write_atomic(output, text)
        click.echo(f"wrote {output} ({len(inv.gpus)} devices)", err=True)


def _write_task_prolog(path: str, inventories, opts) -> None:
    from slurmgpu.render import gres
    from slurmgpu.util.emit import emit

    # the TaskProlog that sets ASCEND_RT_VISIBLE_DEVICES; `wrote PATH` or `PATH: unchanged`
    emit(gres.render_task_prolog(list(inventories), opts), path, mode=0o755)


def _slurm_version(text: str | None):
    """The target Slurm version of --slurm-version (warning when it had to be assumed)."""
    from slurmgpu.configure.gen_gres import gres_options

    opts, notes = gres_options(text)
    for note in notes:
        _warn(note)
    return opts.slurm_version


@click.command(name="gen-gres")
@click.option(
    "--snapshot",
    "snapshot_paths",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Inventory snapshot to read (default: this node, live); repeat for one cluster-wide "
    "gres.conf (docs/fleet.md).",
)
@click.option(
    "--snapshot-dir",
    type=click.Path(file_okay=False),
    help="Every *.json snapshot in this directory: one cluster-wide gres.conf.",
)
@click.option(
    "--host-root",
    default=None,
    type=click.Path(file_okay=False),
    help="Host tree for a live read (default /); not with --snapshot.",
)
@click.option(
    "--output",
    "-o",
    default="-",
    show_default=True,
    help="gres.conf path to write, or - for stdout.",
)
@click.option(
    "--check", is_flag=True, help="Validate with Slurm's own parser (slurmd -G) before installing."
)
@emit_options
@click.option(
    "--slurm-version",
    default=None,
    help="Target Slurm X.Y[.Z] (default: sinfo --version, else 22.05).",
)
@click.option(
    "--shards-per-gpu",
    default=None,
    type=strict.IntRange(min=1),
    help="Add Name=shard Count=N (N >= 1) per whole GPU (default: no shards).",
)
@click.option(
    "--gpu-types",
    type=click.Choice(["short", "full"]),
    default="short",
    show_default=True,
    help="a100 or Slurm's long nvidia_a100-sxm4-40gb.",
)
@click.option(
    "--mig-types",
    type=click.Choice(["short", "full"]),
    default="short",
    show_default=True,
    help="1g.10gb or nvidia_a100_1g.10gb.",
)
@click.option(
    "--node-line", is_flag=True, help="Also print GresTypes= and the NodeName= line for slurm.conf."
)
@click.option(
    "--node-name",
    default=None,
    help="NodeName for the node line (default: the inventory's host name).",
)
@click.option(
    "--numa-as-socket",
    is_flag=True,
    help="Count NUMA nodes as sockets (SlurmdParameters=numa_node_as_socket).",
)
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Generate for the healthy GPUs when some are missing (loudly).",
)
@click.option(
    "--task-prolog",
    "task_prolog",
    default=None,
    type=click.Path(dir_okay=False),
    help="Also write the TaskProlog that sets ASCEND_RT_VISIBLE_DEVICES (Ascend NPUs).",
)
def gen_gres(
    snapshot_paths: tuple[str, ...],
    snapshot_dir: str | None,
    host_root: str | None,
    output: str,
    check: bool,
    show_diff: bool,
    dry_run: bool,
    emit_dir: str | None,
    slurm_version: str | None,
    shards_per_gpu: int | None,
    gpu_types: str,
    mig_types: str,
    node_line: bool,
    node_name: str | None,
    numa_as_socket: bool,
    allow_partial: bool,
    task_prolog: str | None,
) -> None:
    """Generate gres.conf (and with --node-line the slurm.conf node definition).

    With --output - (the default) the node definition, when asked for, comes first, then a
    blank line, then gres.conf. With --output PATH gres.conf is written there atomically
    (old file kept as PATH.bak) and the node definition goes to stdout.
    """

    from slurmgpu.configure.gen_gres import check_gres, gen_gres, gres_options
    from slurmgpu.util.emit import emit, emit_node_definition

    if (show_diff or dry_run or emit_dir) and output == "-":
        raise UsageError("--diff, --dry-run and --emit need --output PATH (the live file)")
    writing = {"diff": show_diff, "dry_run": dry_run, "emit_dir": emit_dir}
    opts, notes = gres_options(
        slurm_version,
        gpu_types=gpu_types,
        mig_types=mig_types,
        shards_per_gpu=shards_per_gpu or 0,
        numa_as_socket=numa_as_socket,
        node_name=node_name,
        allow_partial=allow_partial,
    )
    for note in notes:
        _warn(note)
    if len(snapshot_paths) > 1 or snapshot_dir:
        from slurmgpu.cli.fleet import gen_cluster_gres
        from slurmgpu.sources import snapshot

        if host_root is not None:
            raise UsageError(
                "--host-root and --snapshot exclude each other: a snapshot is read as is"
            )
        if task_prolog:
            _write_task_prolog(task_prolog, snapshot.load_many(snapshot_paths, snapshot_dir), opts)
        gen_cluster_gres(snapshot_paths, snapshot_dir, opts, output, check, writing, node_line)
        return
    files = gen_gres(opts, snapshot_paths[0] if snapshot_paths else None, host_root)
    if task_prolog:
        _write_task_prolog(task_prolog, [files.inventory], opts)
    for warning in files.warnings:
        _warn(warning, loud=warning.startswith(("PARTIAL", "left out")))

    def validate(text: str) -> None:
        check_gres(files, text, say=lambda line: click.echo(f"slurmgpu: check: {line}", err=True))

    if output == "-":
        if check:
            validate(files.gres_conf)
        if node_line:
            click.echo(files.node_conf)
        click.echo(files.gres_conf, nl=False)
        return
    status = emit(files.gres_conf, output, check=validate if check else None, **writing)
    if node_line and emit_dir:
        emit_node_definition(emit_dir, files.node_conf)
    if node_line and not show_diff:
        click.echo(files.node_conf, nl=False)
    exit_with(status)
