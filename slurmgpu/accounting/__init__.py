"""GPU accounting analysis as typed stages (no logic here; see `pipeline.py`).

from slurmgpu.accounting import AnalysisOptions, analyze
result = analyze(AnalysisOptions(files=["nov.sacct.gz"], capacity={"gpu": 64}))
result.to_dict()  # the JSON document (docs/accounting.md)
"""

from slurmgpu.accounting.document import AnalysisResult, json_safe
from slurmgpu.accounting.options import AnalysisOptions
from slurmgpu.accounting.pipeline import analyze

__all__ = ["AnalysisOptions", "AnalysisResult", "analyze", "json_safe"]
