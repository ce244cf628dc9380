"""The collector's node_exporter textfile passes `promtool check metrics`."""

from __future__ import annotations

from tests.unit.measure.test_collector import (  # noqa: F401  (nvml: the fixture)
    collect,
    load_h100,
    nvml,
    options,
    serve,
)
from tests.unit.views.test_promtool import promtool


def test_collector_textfile(nvml, tmp_path):  # noqa: F811  (the imported fixture)
    serve(nvml, tmp_path, "dgx-h100", lambda d: load_h100(d, [80]))
    textfile = tmp_path / "slurmgpu.prom"
    collect(options(tmp_path, textfile=textfile))
    text = textfile.read_text()
    assert "slurmgpu_" in text
    assert promtool(text) == ""
