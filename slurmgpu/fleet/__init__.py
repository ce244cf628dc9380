"""Fleet operations: many nodes at once (cluster-wide gres.conf, inventory through Slurm,
drift and health checks, moving idle nodes between partitions). See docs/fleet.md."""
