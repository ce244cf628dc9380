"""Views: a wing's result -> text, HTML, JSON or Prometheus (docs/architecture.md).

`report.py` (the accounting analysis: text, JSON, HTML, Prometheus), `svg.py` (its
plots), `replay.py` (a replay report), `mig.py` (a MIG plan, mig-parted config, gres preview),
`fleet_check.py` (`slurmgpu check`), `rebalance.py` (a rebalance plan). Views read results;
they never compute them (that is the wings below) and never touch the world.
"""
