"""`pgval bench report`: how long a report with every plot takes, cold and warm."""

from __future__ import annotations

import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgval.report.build import build_report
from pgval.report.plots.batch import default_workers


def run_report_bench(db: Path, workdir: Path,
                     progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`pgval report --format html --plots` on ``db`` twice: cold (an empty plots folder)
    and warm (every plot kept); wall and CPU seconds (this process and its drawing
    processes), plots drawn, page and plot bytes."""
    shutil.rmtree(workdir, ignore_errors=True)
    page, plots = workdir / "report.html", workdir / "plots"
    out: dict[str, Any] = {"db": str(db)}
    for name in ("cold", "warm"):
        drawn = 0

        def count(line: str) -> None:
            nonlocal drawn
            drawn += line.startswith("plot ") and "kept" not in line
            if progress:
                progress(line)

        cpu0 = [resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN)]
        t0 = time.perf_counter()
        build_report(db, fmt="html", out=page, plots_dir=plots, progress=count)
        wall = time.perf_counter() - t0
        cpu1 = [resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN)]
        cpu = sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime
                  for a, b in zip(cpu0, cpu1, strict=True))
        out[name] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "drawn": drawn}
    out.update(runs=len(list(plots.glob("run-*.png"))), workers=default_workers(),
               page_bytes=page.stat().st_size,
               plots_bytes=sum(p.stat().st_size for p in plots.glob("*.png")))
    return out
