"""Measured GPU use: time-averaged sources the accounting stage applies to runs.

Three sources, one interface (`slurmgpu.model.measure.MeasureSource`):

- `jobstats.JobstatsSource`: Princeton jobstats summaries (`JS1:` in AdminComment);
- `prometheus.PrometheusSource`: a Prometheus server holding DCGM exporter or jobstats'
  exporter series;
- `summary.CollectorSource`: the summaries slurmgpu's own node agent (`slurmgpu collect`)
  stores at job end, in AdminComment (`SG1:`) or in a spool directory.

`options.build_measure_sources` turns the command-line options into that list. Each source
keeps the problems it met as typed `MeasureWarning`s (never a silently dropped run).
"""

from slurmgpu.measure.jobstats import JobstatsSource
from slurmgpu.measure.options import MeasureOptions, build_measure_sources, measure_options
from slurmgpu.measure.prometheus import PrometheusSource
from slurmgpu.measure.summary import CollectorSource, SpoolSource
from slurmgpu.measure.warnings import MeasureWarning

__all__ = [
    "CollectorSource",
    "JobstatsSource",
    "MeasureOptions",
    "MeasureWarning",
    "PrometheusSource",
    "SpoolSource",
    "build_measure_sources",
    "measure_options",
]
