"""GPU accounting analysis as typed stages (no logic here; see `pipeline.py`).

from slurmgpu.accounting import AnalysisOptions, analyze
result = analyze(AnalysisOptions(files=["nov.sacct.gz"], capacity={"gpu": 64}))
result.document  # the typed AnalysisDocument (document.py) the renderers read
result.document.to_json()  # the JSON document (docs/accounting.md)
"""

from slurmgpu.accounting.document import AnalysisDocument, AnalysisResult, json_safe
from slurmgpu.accounting.options import AnalysisOptions
from slurmgpu.accounting.pipeline import analyze

__all__ = ["AnalysisDocument", "AnalysisOptions", "AnalysisResult", "analyze", "json_safe"]
