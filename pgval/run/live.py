"""Live display of a running experiment: phase, elapsed time, input rate, outputs.

On a terminal it is a rich progress bar that redraws in place; elsewhere (CI
logs, pipes) it prints one line per phase change so logs stay short.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pgval.run.result import Status


class LiveStatus:
    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.interactive = enabled and console.is_terminal
        self._progress: Progress | None = None
        self._task: int | None = None
        self._last_phase: str | None = None

    def __enter__(self) -> LiveStatus:
        if self.interactive:
            self._progress = Progress(
                TextColumn("[bold]{task.fields[phase]:>9}[/]"), BarColumn(),
                TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                console=self.console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task("run", total=1.0, phase="deploy",
                                                 detail="starting Kafka and Spark…")
        elif self.enabled:
            self.console.print("deploy: starting Kafka, Spark and the streaming query…")
        return self

    def update(self, s: Status) -> None:
        detail = (f"{s.elapsed_s:5.0f}/{s.total_s:.0f} s  in {s.input_rate:8,.0f} ev/s  "
                  f"generated {s.generated:,}  outputs {max(s.outputs, 0):,}  "
                  f"batches {s.batches}")
        if s.phase in ("drain", "prime"):
            detail = f"{s.note}: outputs {max(s.outputs, 0):,}, batches {s.batches}"
        elif s.note:  # the warm-up: how far the pipeline is from steady
            detail = f"{s.elapsed_s:5.0f} s  {s.note}  outputs {max(s.outputs, 0):,}"
        if self._progress is not None and self._task is not None:
            frac = min(s.elapsed_s / s.total_s, 1.0) if s.total_s else 0.0
            self._progress.update(self._task, completed=frac, phase=s.phase, detail=detail)
        elif self.enabled and s.phase != self._last_phase:
            self.console.print(f"{s.phase}: {detail}")
        self._last_phase = s.phase

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
