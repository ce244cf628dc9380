"""The library behind the commands that configure a site's Slurm (docs/architecture.md):
`gen_gres`, `gen_topology`, `gen_job_submit`, `qos_plan` / `qos_apply`, and `submit` (the
wrapper's sbatch command line). Each reads what it needs (sources), renders (render) and
checks; the CLI parses options, calls one of them and prints.

Modules are imported one by one (`from slurmgpu.configure.submit import submit`): this file
imports nothing, so `slurmgpu submit` stays fast.
"""
