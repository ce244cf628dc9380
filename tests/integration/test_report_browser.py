"""The HTML report in a real headless browser (Debian's chromium), with no network access.

Checks what a reader would see: the totals text, SVG plots laid out with non-zero size,
no resource fetched at view time (Resource Timing is empty), and a screenshot whose pixels
show the plots' colour. Needs no Slurm daemons.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from slurmgpu.accounting.document import AnalysisDocument
from slurmgpu.util.proc import run
from slurmgpu.views.report import render_html
from slurmgpu.views.svg import PALETTE

DATA = Path(__file__).resolve().parents[1] / "data" / "reports"
# no Slurm here: it runs once, in the session on the host's own Slurm packages
pytestmark = pytest.mark.slurm_only("host", reason="needs no Slurm daemons (a browser test)")

# Every way out is closed: no DNS, a proxy nobody listens on, no background services.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
    "--hide-scrollbars",
)

# Reads the rendered page and writes what it measured into <pre id="probe"> for --dump-dom.
PROBE = """
window.addEventListener('load', function () {
  var svgs = Array.prototype.slice.call(document.querySelectorAll('svg'));
  var out = {
    resources: performance.getEntriesByType('resource').map(function (e) { return e.name; }),
    totals: document.getElementById('totals').innerText,
    svgs: svgs.map(function (s) {
      var r = s.getBoundingClientRect();
      var shapes = s.querySelectorAll('rect.bar, polygon, polyline, circle');
      var drawn = Array.prototype.filter.call(shapes, function (e) {
        var b = e.getBBox(); return b.width > 0 || b.height > 0;  // a flat line has height 0
      }).length;
      return {width: r.width, height: r.height, shapes: shapes.length, drawn: drawn};
    })
  };
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
"""


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail(
            "chromium is not installed: run the README's test command as root: "
            "sudo ./scripts/run-tests (it installs Debian's chromium for this browser test)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    analysis = json.loads((DATA / "analysis-week.json").read_text())
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(AnalysisDocument.from_json(analysis)), encoding="utf-8")
    return path


def _chromium(chromium: str, tmp_path: Path, *args: str) -> str:
    argv = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return run(argv, timeout=90).stdout


def _probed_copy(page: Path, tmp_path: Path) -> Path:
    """The same page plus the probe script, allowed by its hash only (CSP stays closed)."""
    text = page.read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(PROBE.encode()).digest()).decode()
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    assert csp in text
    text = text.replace(csp, f"{csp}; script-src 'sha256-{digest}'")
    text = text.replace("</body>", f"<script>{PROBE}</script>\n</body>")
    probed = tmp_path / "probed.html"
    probed.write_text(text, encoding="utf-8")
    return probed


def test_report_renders_totals_and_plots_offline(chromium, page, tmp_path):
    dom = _chromium(chromium, tmp_path, "--dump-dom", _probed_copy(page, tmp_path).as_uri())
    start = dom.index('<pre id="probe">') + len('<pre id="probe">')
    probe = json.loads(html.unescape(dom[start : dom.index("</pre>", start)]))
    assert probe["resources"] == []  # nothing fetched: no CDN, font, image or script
    assert "7,312.0 of 10,752.0 capacity (68.0%)" in probe["totals"]
    assert "812 (640 with GPUs, 9 pending)" in probe["totals"]
    assert len(probe["svgs"]) == 6  # time series, partitions, QOS, fit fraction, 2 x waits
    for svg in probe["svgs"]:
        assert svg["width"] >= 700 and svg["height"] > 50
        assert svg["shapes"] > 0 and svg["drawn"] == svg["shapes"]
    assert "&lt;script&gt;alert" in dom  # the hostile user name is text, not markup


def _png_rgb(path: Path) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what chromium writes) to HxWx3."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(idat)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if ftype == 2:
            line = bytearray(np.frombuffer(line, np.uint8) + np.frombuffer(prev, np.uint8))
        elif ftype in (1, 3, 4):
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                if ftype == 1:
                    pred = a
                elif ftype == 3:
                    pred = (a + b) >> 1
                else:
                    c = prev[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        out[y] = np.frombuffer(bytes(line), np.uint8)
        prev = line
    return out.reshape(height, width, bpp)[:, :, :3]


def test_report_screenshot_shows_the_plots(chromium, page, tmp_path):
    shot = tmp_path / "report.png"
    _chromium(chromium, tmp_path, "--window-size=1000,1600", f"--screenshot={shot}", page.as_uri())
    pixels = _png_rgb(shot)
    assert pixels.shape[:2] == (1600, 1000)
    not_white = (pixels < 245).any(axis=2).mean()
    assert not_white > 0.05, f"page looks blank ({not_white:.1%} non-white pixels)"
    bar = np.array([int(PALETTE[0][i : i + 2], 16) for i in (1, 3, 5)])
    bar_pixels = (np.abs(pixels.astype(int) - bar).sum(axis=2) < 12).sum()
    assert bar_pixels > 2000, f"only {bar_pixels} pixels of the bar colour: plots not painted"
