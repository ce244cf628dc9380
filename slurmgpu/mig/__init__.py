"""MIG planning and live re-layout (issue #12).

- (`slurmgpu.model.mig_layout`: which sets of GPU instances fit one GPU, placements on the
  memory-slice grid; in `model/` because `sources/mig_nvml.py` reads layouts too.)
- `demand`: what the jobs need, given on the command line or measured from accounting.
- `plan`: per-GPU layouts for a set of nodes that meet a demand with the fewest GPUs carved.
- `preview`: the inventory a plan would produce (for gen-gres's renderer).
- `apply`: the journaled drain -> carve -> reconfigure -> resume workflow for one node.
"""
