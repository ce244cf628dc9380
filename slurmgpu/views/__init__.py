"""Views: a wing's result -> text, HTML, JSON or Prometheus (docs/architecture.md).

`report/` (the accounting analysis: `text.py`, `html.py`, `prom.py` around the tables they
share, `tables.py`; JSON and `render_report` in `__init__.py`), `svg.py` (its
plots), `replay.py` (a replay report), `mig.py` (a MIG plan, mig-parted config, gres preview),
`fleet_check.py` (`slurmgpu check`), `rebalance.py` (a rebalance plan). Views read results;
they never compute them (that is the wings below) and never touch the world.
"""
