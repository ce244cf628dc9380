"""Small shared helpers: subprocess, atomic file writes, Slurm hostlists, units."""
