"""The operations kit: systemd units and timers, the HealthCheckProgram wrapper, the epilog
script and the logrotate config, installed with the path of the real `slurmgpu` command."""
