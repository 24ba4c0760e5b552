"""The HTML report as a reader opens it: in a real headless browser (Debian's chromium).

The example database's page, with its plots as files beside it: the page must be small
(its figures are linked, not inlined), render (a screenshot of the first screen that is not
blank), and never be wider than the window (a table with a 400-character reason once made
the whole page scroll sideways; long cells now wrap and a wide table scrolls in its own
box). The layout is measured by a script added to a copy of the page, which writes what it
found into the DOM that chromium dumps.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from pgval.report.build import build_report
from pgval.report.data import Selection

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "experiments" / "grid-23" / "results.db"
WIDTH, HEIGHT = 1280, 900

MEASURE = """<script>
window.addEventListener('load', () => {
  const doc = document.documentElement;
  const out = document.createElement('pre');
  out.id = 'pgval-measure';
  out.textContent = JSON.stringify({scroll: doc.scrollWidth, client: doc.clientWidth,
                                    images: document.images.length});
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed: .ci/setup installs it (apt-get install "
                    "chromium)")
    return found


def browse(page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=10000", *extra,
         page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example report's HTML (two cells' runs plotted: the page test is about the
    page, the plots' speed is `pgval bench report`'s)."""
    out = tmp_path_factory.mktemp("page") / "report.html"
    build_report(EXAMPLE, Selection(fault="crash", pg="e1", include_unknown=True),
                 fmt="html", out=out, plots_dir=out.parent / "plots")
    return out


def test_a_report_made_again_draws_only_what_changed(page: Path) -> None:
    """The plots folder remembers what each figure shows: the same report again draws
    nothing; a figure deleted is drawn again, alone."""
    lines: list[str] = []
    again = page.with_name("again.html")
    selection = Selection(fault="crash", pg="e1", include_unknown=True)
    build_report(EXAMPLE, selection, fmt="html", out=again, plots_dir=page.parent / "plots",
                 progress=lines.append)
    runs = [line for line in lines if line.startswith("plot ") and "/" in line]
    assert runs and all(line.endswith("(unchanged, kept)") for line in runs), runs
    first = sorted((page.parent / "plots").glob("run-*.png"))[0]
    first.unlink()
    lines.clear()
    build_report(EXAMPLE, selection, fmt="html", out=again, plots_dir=page.parent / "plots",
                 progress=lines.append)
    drawn = [line for line in lines if "/" in line and not line.endswith("kept)")]
    assert len(drawn) == 1 and first.name in drawn[0] and first.is_file(), lines


def test_the_page_links_its_plots_and_stays_small(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "data:image/png" not in text
    linked = re.findall(r'src="(plots/[^"]+\.png)" loading="lazy"', text)
    assert linked and all((page.parent / p).is_file() for p in linked)
    assert page.stat().st_size < 500_000


def test_the_page_never_scrolls_sideways_in_a_browser(page: Path) -> None:
    measured = page.with_name("measured.html")
    measured.write_text(page.read_text(encoding="utf-8").replace("</body>",
                                                                 MEASURE + "</body>"))
    done = browse(measured, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="pgval-measure">(.*?)</pre>', done.stdout)
    assert found, done.stdout[-2000:]
    layout = json.loads(found.group(1))
    assert layout["images"] > 3
    assert layout["scroll"] <= layout["client"], layout


def test_a_screenshot_of_the_page_is_the_window_and_not_blank(page: Path) -> None:
    shot = page.with_name("shot.png")
    done = browse(page, f"--screenshot={shot}")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (WIDTH, HEIGHT)
        grey = image.convert("L")
        # Text and table rules on white: some dark pixels, a spread of tones.
        assert ImageStat.Stat(grey).stddev[0] > 10
        assert sum(grey.histogram()[:128]) > 500
