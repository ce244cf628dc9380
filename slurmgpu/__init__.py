"""slurmgpu: make Slurm clusters of 8-GPU servers run near full utilization."""

__version__ = "0.1.0"
