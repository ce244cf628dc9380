"""Tier workflows that touch the world (users, the installed Slurm, files): the job_submit
script or module rendered, checked and installed."""
