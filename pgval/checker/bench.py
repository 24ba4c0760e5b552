"""Benchmark of the offline path: read files → oracle → validator → metrics.

Builds a synthetic input file and a matching output file (the oracle's outputs
with a few planted anomalies so no fast path is taken), then times each stage.
Building the files is not timed. Numbers go to docs/performance.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from pgval.checker.metrics import compute_metrics
from pgval.checker.validator import validate
from pgval.core.files import open_public
from pgval.core.schema import resource_name
from pgval.oracle import expected_outputs
from pgval.records.parse import ResourceTable, read_inputs, read_outputs


@dataclass
class BenchResult:
    events: int
    outputs: int
    file_mb: float
    stages_s: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return sum(self.stages_s.values())

    @property
    def events_per_s(self) -> float:
        return self.events / self.total_s if self.total_s else 0.0


def write_dataset(workdir: Path, n_events: int, resources: int = 16, rate: int = 100_000,
                  window_ms: int = 10_000, seed: int = 7) -> tuple[Path, Path]:
    """Write inputs.jsonl and outputs.jsonl; 99.5 % GET, a few drops and duplicates planted."""
    rng = np.random.default_rng(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    inputs_path = workdir / "inputs.jsonl"
    names = [resource_name(r) for r in range(resources)]
    chunk = 1_000_000
    t0 = 1_700_000_000_000
    with open_public(inputs_path) as fh:
        for a in range(0, n_events, chunk):
            idx = np.arange(a, min(a + chunk, n_events), dtype=np.int64)
            res = (idx % resources).tolist()
            is_get = (rng.random(len(idx)) < 0.995).tolist()
            ets = (t0 + idx * 1000 // rate).tolist()
            ing = (np.array(ets) + rng.integers(1, 30, len(idx))).tolist()
            fh.write("".join(
                f'{{"id":{i},"type":"{"GET" if g else "POST"}","resource":"{names[r]}",'
                f'"event_ts":{e},"ingress_ts":{n}}}\n'
                for i, r, g, e, n in zip(idx.tolist(), res, is_get, ets, ing, strict=True)
            ).encode())
    rt = ResourceTable()
    events = read_inputs(inputs_path, rt)
    exp = expected_outputs(events, "sst", window_ms)
    outputs_path = workdir / "outputs.jsonl"
    rows = exp.to_records()
    with open_public(outputs_path) as fh:
        for k, row in enumerate(rows):
            row["ingress_ts"] = int(row["window_end"]) + 1500 + (k % 17)
            if k % 997 == 5:
                continue  # a lost output
            line = orjson.dumps(row) + b"\n"
            fh.write(line)
            if k % 991 == 3:
                fh.write(line)  # a duplicated output
    return inputs_path, outputs_path


def run_offline_bench(workdir: Path, n_events: int, window_ms: int = 10_000) -> BenchResult:
    inputs_path, outputs_path = workdir / "inputs.jsonl", workdir / "outputs.jsonl"
    marker = workdir / f"complete-{n_events}"
    if not marker.exists():
        inputs_path, outputs_path = write_dataset(workdir, n_events, window_ms=window_ms)
        for old in workdir.glob("complete-*"):
            old.unlink()
        marker.touch()
    size_mb = (inputs_path.stat().st_size + outputs_path.stat().st_size) / 1e6
    stages: dict[str, float] = {}
    cpu: dict[str, float] = {}
    rt = ResourceTable()
    results: dict[str, object] = {}

    def timed(name: str, fn: Callable[[], object]) -> object:
        t, c = time.perf_counter(), time.process_time()
        results[name] = fn()
        stages[name] = time.perf_counter() - t
        cpu[name] = time.process_time() - c
        return results[name]

    events = timed("read inputs", lambda: read_inputs(inputs_path, rt))
    exp = timed("oracle", lambda: expected_outputs(events, "sst", window_ms))
    produced = timed("read outputs", lambda: read_outputs(outputs_path, rt))
    v = timed("validator", lambda: validate(exp, produced))
    timed("metrics", lambda: compute_metrics(events, produced, v, window_ms))
    assert v.duplicate > 0 and v.unprocessed > 0, "planted anomalies must be found"
    return BenchResult(events=len(events), outputs=len(produced), file_mb=size_mb,
                       stages_s=stages, cpu_s=cpu)

