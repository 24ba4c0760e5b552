"""``pgval lint``: a job tried on a small sample of its input, with no Kafka and no cluster,
so a job pgval cannot judge is found in seconds instead of after a run.

A sample of the job's input (the web log, or the job's input model with its skew,
disorder and late records) is cut into micro-batches and written as files; one Spark
process (:mod:`pgval.topologies.lint`) runs the job over it as a stream and as a batch;
this module compares the two as the validator would and words every problem in one
sentence: a job that does not load (a missing package among them), an operator the table in
docs/your-job.md refuses, a query Spark will not start, a key that does not identify an
output, and a stream whose rows differ from the batch's (rows missing or extra, other
IDs, other values). Records Spark dropped behind the watermark are named as such: a run
tells them apart by replaying its micro-batches and reports them apart. A fan-out is
named, not refused: it is judged pair by pair.

The process runs in a private work folder guarded like a run's (``state.json`` and a
reaper): a kill of pgval does not leave the process behind, and the folder (the sample, a
copy of the records) goes when lint ends; a ``kill -9`` of pgval leaves the folder in the
temp directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pgval.cluster.guard import RunGuard
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.core.record_ids import OWN_KEY, record_ids
from pgval.datasets.models import InputModel, PreparedModel
from pgval.oracle.values import DEFAULT_TOLERANCE, wrong_values

#: The sample's defaults: records, micro-batches, event time per batch, the web log's keys.
RECORDS = 2_000
BATCHES = 6
BATCH_SPAN_MS = 10_000
RESOURCES = 16
#: The sample's first event time (2026-01-01T00:00:00Z): fixed, so a sample repeats.
START_MS = 1_767_225_600_000
#: pgval's own closing events, this far past the sample and twice that: the first moves the
#: watermark past every window of the sample, the batch of the second closes them.
CLOSE_GAP_MS = 30 * 24 * 3_600_000
#: How long the Spark process may take (its start is most of it).
TIMEOUT_S = 300.0
#: How many examples a sentence names.
EXAMPLES = 2


@dataclass(frozen=True)
class Sample:
    """What was written: each input's topic name, the batches, and the IDs of pgval's own
    closing records (set aside on both sides)."""

    kind: str  # "weblog" or "kafka"
    inputs: dict[str, str]
    batches: int
    records: int
    own_ids: np.ndarray
    #: Every real record's ID (a row listing another is refused, as a run refuses it).
    input_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class LintReport:
    """One job's lint: its problems (one sentence each; none: pgval can judge it over this
    sample), and what was tried."""

    job: str
    problems: list[str] = field(default_factory=list)
    #: What a run will judge, but a user should know first (records Spark drops behind
    #: the watermark by its own rule).
    warnings: list[str] = field(default_factory=list)
    records: int = 0
    batches: int = 0
    expected_rows: int = 0
    stream_rows: int = 0
    dropped_behind_watermark: int = 0
    #: The batch's rows fan out (an input in several rows): which operator, how many.
    fan_out: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "ok": self.ok, "problems": self.problems,
                "warnings": self.warnings,
                "records": self.records, "batches": self.batches,
                "expected_rows": self.expected_rows, "stream_rows": self.stream_rows,
                "dropped_behind_watermark": self.dropped_behind_watermark,
                "fan_out": self.fan_out,
                "seconds": round(self.seconds, 3)}


# ------------------------------------------------------------------------------ the sample
def _batch_of(n: int, batches: int) -> np.ndarray:
    """Each of ``n`` records' micro-batch: in order, as even as can be."""
    return (np.arange(n, dtype=np.int64) * batches) // max(1, n)


def _write(folder: Path, name: str, batch: int, table: pa.Table) -> None:
    from pgval.core.files import private_temp_path

    path = folder / name / f"batch-{batch:04d}.parquet"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with private_temp_path(path) as tmp:  # 0600, never through a planted link
        pq.write_table(table, tmp)
    # The file source takes files oldest first: one second apart, in batch order.
    stamp = time.time() - 3_600 + batch
    os.utime(path, (stamp, stamp))


def weblog_sample(folder: Path, records: int, batches: int, seed: int = 0,
                  resources: int = RESOURCES) -> Sample:
    """The web log as the generator makes it (IDs from 0, 99.5 % GET, ``resources``
    keys), ``BATCH_SPAN_MS`` of event time a batch, then two batches of pgval's closing
    events (negative IDs), as the driver's sources read them from Kafka."""
    from pgval.core.schema import GET, POST, resource_name
    from pgval.datasets.generator import GeneratorConfig, generate_range

    events = generate_range(GeneratorConfig(resources=resources, seed=seed), 0, 0, records)
    times = START_MS + (np.arange(records) * batches * BATCH_SPAN_MS) // max(1, records)
    batch = _batch_of(records, batches)
    names = [resource_name(r) for r in range(resources)]
    rows = [{"id": int(i), "type": POST if p else GET, "resource": names[r],
             "event_ts": int(t)} for i, p, r, t in zip(events.ids.tolist(),
                                                      events.is_post.tolist(),
                                                      events.resource.tolist(),
                                                      times.tolist(), strict=True)]
    posts = events.is_post.astype(bool)
    own: list[int] = []
    last = int(times[-1]) if records else START_MS
    for k in (1, 2):  # the closing events: one GET and one POST per resource
        for r in range(resources):
            for typ in (GET, POST):
                own.append(-1 - len(own))
                rows.append({"id": own[-1], "type": typ, "resource": names[r],
                             "event_ts": last + k * CLOSE_GAP_MS})
                posts = np.append(posts, typ == POST)
                batch = np.append(batch, batches - 1 + k)
    values = np.array([json.dumps(r).encode() for r in rows], dtype=object)
    for name, mine in (("get", ~posts), ("post", posts)):
        offsets = np.flatnonzero(mine)
        for b in range(batches + 2):
            at = offsets[batch[offsets] == b]
            _write(folder, name, b, pa.table({
                "value": pa.array(values[at].tolist(), pa.binary()),
                "partition": pa.array(np.zeros(len(at), dtype=np.int32)),
                "offset": pa.array(np.searchsorted(offsets, at).astype(np.int64))}))
    sample = Sample("weblog", {"get": "get", "post": "post"}, batches, records,
                    np.sort(np.array(own, dtype=np.int64)), events.ids.astype(np.int64))
    _describe(folder, sample)
    return sample


def model_sample(folder: Path, model: InputModel, records: int, batches: int, seed: int = 0
                 ) -> Sample:
    """The job's input model (its records, skew, disorder and late records), its inputs in
    slot order with the record IDs a run gives them (partition 0), then two batches of
    pgval's own closing records (Kafka key :data:`OWN_KEY`) in every input."""
    prepared = PreparedModel(model, seed)
    ids = np.arange(records, dtype=np.int64)
    times = START_MS + (ids * batches * BATCH_SPAN_MS) // max(1, records)
    slots, keys, values = prepared.records(ids, times)
    batch = _batch_of(records, batches)
    last = int(times[-1]) if records else START_MS
    own: list[int] = []
    real: list[np.ndarray] = []
    for slot, name in enumerate(model.names):
        mine = np.flatnonzero(slots == slot)
        own_values = [v for k in (1, 2) for v in
                      prepared.own_records(slot, 1, last + k * CLOSE_GAP_MS)]
        own_batches = [batches, batches + 1]
        all_values = [values[i] for i in mine] + own_values
        all_keys = [keys[i] for i in mine] + [OWN_KEY] * len(own_values)
        all_batches = np.concatenate([batch[mine], own_batches]).astype(np.int64)
        stamps = np.concatenate([times[mine], [last + CLOSE_GAP_MS, last + 2 * CLOSE_GAP_MS]])
        offsets = np.arange(len(all_values), dtype=np.int64)
        own.extend(record_ids(slot, np.zeros(2, dtype=np.int64), offsets[-2:]).tolist())
        real.append(record_ids(slot, np.zeros(len(mine), dtype=np.int64), offsets[:-2]))
        for b in range(batches + 2):
            at = np.flatnonzero(all_batches == b)
            _write(folder, name, b, pa.table({
                "key": pa.array([all_keys[i] for i in at], pa.binary()),
                "value": pa.array([all_values[i] for i in at], pa.binary()),
                "topic": pa.array([name] * len(at), pa.string()),
                "partition": pa.array(np.zeros(len(at), dtype=np.int32)),
                "offset": pa.array(offsets[at]),
                "timestamp": pa.array(stamps[at].astype(np.int64)).cast(
                    pa.timestamp("ms", tz="UTC")),
                "timestampType": pa.array(np.ones(len(at), dtype=np.int32))}))
    sample = Sample("kafka", {name: name for name in model.names}, batches, records,
                    np.sort(np.array(own, dtype=np.int64)),
                    np.concatenate(real) if real else np.zeros(0, np.int64))
    _describe(folder, sample)
    return sample


def _describe(folder: Path, sample: Sample) -> None:
    from pgval.core.files import write_private_json
    from pgval.topologies.lint import SAMPLE_FILE

    write_private_json(folder / SAMPLE_FILE, {"kind": sample.kind, "inputs": sample.inputs,
                                              "batches": sample.batches})


# -------------------------------------------------------------------------- the comparison
def _example(items: Sequence[Any]) -> str:
    shown = ", ".join(str(x) for x in list(items)[:EXAMPLES])
    return shown + (", …" if len(items) > EXAMPLES else "")


def _own_rows(table: pa.Table, own_ids: np.ndarray) -> np.ndarray:
    """Rows that carry one of pgval's own closing IDs (for the counts)."""
    import pyarrow.compute as pc

    ids = table.column("ids").combine_chunks()
    flat = pc.list_flatten(ids).to_numpy(zero_copy_only=False).astype(np.int64)
    parents = pc.list_parent_indices(ids).to_numpy(zero_copy_only=False)
    own = np.zeros(table.num_rows, dtype=bool)
    own[parents[np.isin(flat, own_ids)]] = True
    return own


def _rows(table: pa.Table) -> list[tuple[str, tuple[int, ...], str]]:
    rows = table.to_pydict()
    return [(k, tuple(sorted(i or ())), v) for k, i, v in
            zip(rows["key"], rows["ids"], rows["value"], strict=True)]


def _keyed_as_a_run(expected: pa.Table, stream: pa.Table, own_ids: np.ndarray
                    ) -> tuple[pa.Table, pa.Table]:
    """Both sides without pgval's own IDs, keyed as a run keys them: rows of one ID each
    whose key texts repeat are keyed by their ID (:func:`pgval.oracle.rows.key_by_single_id`)."""
    from pgval.oracle.rows import key_by_single_id, set_aside_rows, single_id_keys

    # pgval's own IDs leave every row, and a row left with none goes (the run's rule).
    expected = set_aside_rows(expected, own_ids)
    stream = set_aside_rows(stream, own_ids)
    expected, by_id = key_by_single_id(expected)
    if by_id:
        keys = single_id_keys(stream.column("key").combine_chunks(),
                              stream.column("ids").combine_chunks())
        stream = stream.set_column(stream.schema.get_field_index("key"), "key", keys)
    return expected, stream


def fan_out_note(expected: pa.Table, own_ids: np.ndarray, operator: str | None
                 ) -> str | None:
    """A sentence naming a fan-out of the batch's rows (inputs in several rows, judged pair
    by pair: no problem), or None."""
    import pyarrow.compute as pc

    rows = expected.filter(pa.array(~_own_rows(expected, own_ids)))
    ids = pc.list_flatten(rows.column("ids")).to_numpy(zero_copy_only=False)
    _, counts = np.unique(ids, return_counts=True)
    shared = int((counts > 1).sum())
    if not shared:
        return None
    return (f"fan-out{f' by {operator}' if operator else ''}: {shared} of {len(counts)} "
            "inputs are in more than one output; each (input, row) pair is judged")


def _unusable_ids(expected: pa.Table, stream: pa.Table, own_ids: np.ndarray,
                  input_ids: np.ndarray | None) -> list[str]:
    """What a run refuses in the IDs themselves: a null among them, an ID that is no
    input (a payload field collected instead of the record's ID)."""
    import pyarrow.compute as pc

    problems = []
    for side, table in (("the batch run", expected), ("the stream", stream)):
        flat = pc.list_flatten(table.column("ids"))
        if flat.null_count or table.column("ids").null_count:
            problems.append(f"{side} has a null among its ids (every output lists the "
                            "input IDs it was made of)")
    if problems or input_ids is None:
        return problems
    flat = pc.list_flatten(expected.column("ids")).to_numpy(zero_copy_only=False)
    stray = np.setdiff1d(flat, np.concatenate([input_ids, own_ids]))
    if len(stray):
        problems.append(f"the batch run lists {len(stray)} IDs that are no input (e.g. "
                        f"{_example(stray.tolist())}): ids must be the records' IDs "
                        "(the web log's id, or record_id() of a record read from Kafka)")
    return problems


def compare_ids(expected: pa.Table, stream: pa.Table, own_ids: np.ndarray,
                tolerance: float, input_ids: np.ndarray | None = None) -> list[str]:
    """The problems of a job judged ID by ID: the batch's rows (what the validator
    expects) and the stream's, both without pgval's own IDs (``input_ids``: every real
    record's ID, None: not checked)."""
    problems = _unusable_ids(expected, stream, own_ids, input_ids)
    if problems:
        return problems
    want, got = map(_rows, _keyed_as_a_run(expected, stream, own_ids))
    by_key = Counter(k for k, _, _ in want)
    if twice := sorted(k for k, c in by_key.items() if c > 1):
        problems.append(f"the key does not identify an output: the batch run has "
                        f"{len(twice)} keys in more than one row (e.g. {_example(twice)}); "
                        "declare build.key, the columns that identify an output")
    if problems:
        return problems
    written = Counter(k for k, _, _ in got)
    if again := sorted(k for k, c in written.items() if c > 1):
        problems.append(f"the stream wrote {len(again)} keys more than once (e.g. "
                        f"{_example(again)}), which pgval counts as duplicates: an output "
                        "must be final when written (append mode)")
    want_by = {k: (ids, v) for k, ids, v in want}
    got_by = {k: (ids, v) for k, ids, v in got}
    if missing := sorted(set(want_by) - set(got_by)):
        problems.append(f"the stream gave no row for {len(missing)} of the batch's "
                        f"{len(want_by)} outputs (e.g. {_example(missing)})")
    if extra := sorted(set(got_by) - set(want_by)):
        problems.append(f"the stream gave {len(extra)} rows the batch run does not have "
                        f"(e.g. {_example(extra)})")
    both = sorted(set(want_by) & set(got_by))
    other_ids = [k for k in both if want_by[k][0] != got_by[k][0]]
    if other_ids:
        problems.append(f"{len(other_ids)} of the stream's rows list other input IDs than "
                        f"the batch's row of the same key (e.g. {_example(other_ids)})")
    same = [k for k in both if want_by[k][0] == got_by[k][0]]
    wrong = wrong_values(pa.array([want_by[k][1] for k in same], pa.string()),
                         pa.array([got_by[k][1] for k in same], pa.string()), tolerance)
    if wrong.any():
        k = same[int(np.flatnonzero(wrong)[0])]
        problems.append(f"{int(wrong.sum())} of the stream's rows have other values than "
                        f"the batch's (e.g. {k}: stream {got_by[k][1]}, batch "
                        f"{want_by[k][1]}): the job's result depends on how its input is cut "
                        "into micro-batches")
    return problems


def compare_rows(expected: pa.Table, stream: pa.Table) -> tuple[list[str], int, int]:
    """The problems of a job judged by its rows: the stream's rows and the batch's, as a
    multiset, pgval's own rows (``own``) set aside; and how many rows each side has."""
    rows = expected.to_pydict()
    want = Counter((k, v) for k, v, own in zip(rows["key"], rows["value"], rows["own"],
                                               strict=True) if not own)
    own = Counter((k, v) for k, v, o in zip(rows["key"], rows["value"], rows["own"],
                                            strict=True) if o)
    got = Counter(zip(stream.column("key").to_pylist(), stream.column("value").to_pylist(),
                      strict=True))
    for row in own:  # an output equal to a row only pgval's records made: set aside
        if row not in want:
            got.pop(row, None)
        else:
            got[row] -= own[row]
    got = +got
    problems = []
    if missing := want - got:
        problems.append(f"the stream did not give {sum(missing.values())} of the batch's "
                        f"{sum(want.values())} rows (e.g. {_example([k for k, _ in missing])})")
    if extra := got - want:
        problems.append(f"the stream gave {sum(extra.values())} rows the batch run does not "
                        f"have (e.g. {_example([k for k, _ in extra])})")
    return problems, sum(want.values()), sum(got.values())


def _watermark_note(progress: Sequence[Mapping[str, Any]]) -> tuple[int, str | None]:
    """Rows Spark dropped behind the watermark over the sample, and the sentence that
    says what pgval makes of them."""
    dropped = sum(int(p.get("dropped") or 0) for p in progress)
    if not dropped:
        return 0, None
    return dropped, (f"Spark dropped {dropped} rows behind the watermark over the sample "
                     "(late records, as Spark documents): the batch run keeps them, and a "
                     "run reports their inputs apart, as dropped behind the watermark (the "
                     "run's micro-batches replayed); a longer withWatermark delay, or less "
                     "--disorder/--late, keeps them")


# ---------------------------------------------------------------------------- the process
def lint_job(job: str, model: InputModel | None = None,
             spark_conf: Mapping[str, str] | None = None, records: int = RECORDS,
             batches: int = BATCHES, seed: int = 0) -> LintReport:
    """``job`` tried on a sample of its input (``model``; None: the web log): its problems,
    each one sentence. Starts one Spark process; nothing is left behind."""
    from pgval.core.driver_spec import SPARK_CONF_ENV
    from pgval.host.procs import spawn

    t0 = time.monotonic()
    report = LintReport(job, records=records, batches=batches)
    work = Path(tempfile.mkdtemp(prefix="pgval-lint-"))
    guard = RunGuard(work, "lint").start()
    try:
        sample_dir = work / "sample"
        sample = (weblog_sample(sample_dir, records, batches, seed) if model is None
                  else model_sample(sample_dir, model, records, batches, seed))
        argv = [sys.executable, "-m", "pgval.topologies.lint", "--job", job,
                "--sample", str(sample_dir), "--out", str(work)]
        log = work / "lint.log"
        # Recorded under the guarded folder: a kill of pgval does not leave it behind.
        proc = spawn("lint", argv, log, env={SPARK_CONF_ENV: json.dumps(dict(spark_conf))}
                     if spark_conf else None, pid_dir=work / "pids")
        try:
            rc = proc.popen.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            # Always: the group's JVM may outlive its Python leader for a moment, and a
            # group still alive keeps the guard (and this folder) for the reaper.
            proc.stop(grace_s=5.0)
        if rc != 0 or not (work / "lint.json").is_file():
            raise _process_failed(rc, log)
        found = json.loads((work / "lint.json").read_text())
        for name in ("expected", "stream"):
            if (work / f"{name}.parquet").is_file():
                found[name] = pq.read_table(work / f"{name}.parquet")
        judge(report, found, sample)
    finally:
        if guard.stop():  # else a process still runs: the reaper needs the folder
            shutil.rmtree(work, ignore_errors=True)
    report.seconds = time.monotonic() - t0
    return report


def _process_failed(rc: int | None, log: Path) -> EnvironmentFailure:
    """The Spark process failed or ran out of time (the machine's, not the job's): one
    sentence naming a copy of its log, which outlives the work folder."""
    from pgval.core.files import write_private

    kept = Path(tempfile.gettempdir()) / f"pgval-lint-{os.getpid()}.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    write_private(kept, text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    what = (f"did not end within {TIMEOUT_S:.0f} s" if rc is None else
            f"failed (exit {rc}): {lines[-1] if lines else 'no output'}")
    return EnvironmentFailure(f"lint's Spark process {what} (log: {kept}; --no-lint runs "
                              "without it)")


def judge(report: LintReport, found: Mapping[str, Any], sample: Sample) -> None:
    """What the Spark process found (:func:`pgval.topologies.lint.try_job`: its problems,
    the batch's and the stream's rows) compared, into ``report``."""
    report.problems.extend(found["problems"])
    if report.problems:
        return
    expected, stream = found["expected"], found["stream"]
    tolerance = found.get("tolerance")
    if found.get("by_rows"):  # pgval's own rows left out of the counts, as of the checks
        problems, report.expected_rows, report.stream_rows = compare_rows(expected, stream)
    else:
        report.expected_rows = int((~_own_rows(expected, sample.own_ids)).sum())
        report.stream_rows = int((~_own_rows(stream, sample.own_ids)).sum())
        problems = compare_ids(expected, stream, sample.own_ids,
                               DEFAULT_TOLERANCE if tolerance is None else float(tolerance),
                               sample.input_ids)
        report.fan_out = fan_out_note(expected, sample.own_ids, found.get("fan_out"))
    dropped, note = _watermark_note(found.get("progress") or [])
    report.dropped_behind_watermark = dropped
    if problems and note:
        if not found.get("by_rows") and _only_lacking(expected, stream, sample.own_ids):
            report.warnings.append(note)  # Spark's own rule, not the job's fault
            return
        problems.append(note)
    report.problems.extend(problems)


def _only_lacking(expected: pa.Table, stream: pa.Table, own_ids: np.ndarray) -> bool:
    """The stream's rows differ from the batch's only by lacking inputs: no key the batch
    lacks, none twice, each row's IDs among its batch row's (what records dropped behind
    the watermark do)."""
    want, got = map(_rows, _keyed_as_a_run(expected, stream, own_ids))
    want_by = {k: set(ids) for k, ids, _ in want}
    keys = [k for k, _, _ in got]
    return len(set(keys)) == len(keys) and all(
        k in want_by and set(ids) <= want_by[k] for k, ids, _ in got)


class LintFailed(UserMistake):
    """The job's lint found problems before a run (``validate``/``matrix`` with ``--job``):
    the run would not be judged, so it does not start."""

    def __init__(self, report: LintReport) -> None:
        self.report = report
        said = (report.problems[0] if len(report.problems) == 1 else
                " ".join(f"({k}) {p}" for k, p in enumerate(report.problems, 1)))
        super().__init__(f"lint, before the run: {said} (pgval lint {report.job} says the "
                         "same in seconds; --no-lint runs anyway)")


def lint_before_run(cfg: Any, say: Any = None) -> LintReport | None:
    """``cfg``'s job linted on a sample of its input before any cluster starts (None: no
    job, or Spark runs in containers, where this machine may have no Spark); a job with
    problems is :class:`LintFailed`. ``say``: where the one progress line goes."""
    from pgval.config import input_model

    if not getattr(cfg, "job", None) or str(cfg.deploy) == "compose":
        return None
    if say is not None:
        say(f"lint: trying {cfg.job} on a sample of its input before the run (a local "
            "Spark, no Kafka; --no-lint skips) …")
    report = lint_job(cfg.job, input_model(cfg), dict(cfg.spark_conf or {}))
    if report.problems:
        raise LintFailed(report)
    if say is not None:
        for warning in report.warnings:
            say(f"lint warning: {warning}")
    return report
