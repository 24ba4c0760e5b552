"""The numpy checker and the Spark checker held to each other on the same run.

Two implementations of one set of rules earn trust in each other only where they agree on
everything they both say: the run-level counts, each phase's row and each anomaly set, ID
for ID. :func:`differences` names every place they do not, in one sentence each.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from pgval.checker.evaluate import Evaluation
from pgval.checker.validator import ANOMALIES, Validation, validate
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.core.schema import Topology
from pgval.oracle.expected import ExpectedOutputs
from pgval.records.parse import InputEvents, OutputRecords
from pgval.records.phases import PHASES, Phases
from pgval.scale.checker import COUNTED, SparkValidation, validate_on_spark
from pgval.scale.frames import write_expected, write_inputs, write_produced
from pgval.scale.oracle import expected_on_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")

#: How many differing IDs (and differences) a sentence shows.
SHOWN_IDS = 5
#: The checker's Spark by default: this machine's cores, a small driver heap (the tables
#: are Parquet on disk; Spark spills what does not fit).
DEFAULT_MASTER = "local[2]"
DEFAULT_HEAP_MB = 1024


def _set_difference(kind: str, here: np.ndarray, there: np.ndarray) -> str | None:
    only_numpy = np.setdiff1d(here, there)
    only_spark = np.setdiff1d(there, here)
    if not len(only_numpy) and not len(only_spark):
        return None
    parts = []
    if len(only_numpy):
        parts.append(f"{len(only_numpy)} only in numpy's (e.g. "
                     f"{', '.join(map(str, only_numpy[:SHOWN_IDS].tolist()))})")
    if len(only_spark):
        parts.append(f"{len(only_spark)} only in Spark's (e.g. "
                     f"{', '.join(map(str, only_spark[:SHOWN_IDS].tolist()))})")
    return f"{kind} IDs differ: {'; '.join(parts)}"


def differences(numpy_side: Validation, spark_side: SparkValidation,
                sets: bool = True, duplicate_inputs: int | None = None) -> list[str]:
    """Every figure, phase row and (with ``sets``) anomaly set on which the two checkers
    differ, and the inputs set aside as retries where the Spark oracle counted them
    (``duplicate_inputs``: numpy's oracle's count); empty when they agree."""
    found = []
    if spark_side.duplicate_inputs is not None and duplicate_inputs is not None \
            and spark_side.duplicate_inputs != duplicate_inputs:
        found.append(f"inputs set aside as retries: numpy {duplicate_inputs}, Spark "
                     f"{spark_side.duplicate_inputs}")
    for name in COUNTED:
        a = getattr(numpy_side, name)
        b = getattr(spark_side, name)
        if a != b:
            found.append(f"{name}: numpy {a}, Spark {b}")
    for phase in PHASES:
        a_row = numpy_side.phases[phase].as_dict()
        b_row = spark_side.phases[phase].as_dict()
        for key, a in a_row.items():
            if a != b_row[key]:
                found.append(f"{phase} {key}: numpy {a}, Spark {b_row[key]}")
    if numpy_side.guarantee != spark_side.guarantee:
        found.append(f"verdict: numpy {numpy_side.guarantee}, Spark {spark_side.guarantee}")
    if sets:
        for kind in ANOMALIES:
            said = _set_difference(kind, numpy_side.ids(kind), spark_side.ids(kind))
            if said:
                found.append(said)
    return found


@dataclass
class SparkCheck:
    """A run judged again by the Spark checker and held to the numpy checker."""

    master: str
    spark: SparkValidation
    differences: list[str]
    seconds: float
    sets: Path | None  # where the anomaly sets were kept (None: removed after the check)
    #: The expected outputs came from the Spark oracle (else from numpy's columns).
    spark_oracle: bool = False

    @property
    def agrees(self) -> bool:
        return not self.differences

    def note(self) -> str:
        """One sentence: agreed on what, or the first differences."""
        where = f" (anomaly sets in {self.sets})" if self.sets else ""
        who = "the Spark oracle and checker" if self.spark_oracle else "the Spark checker"
        if self.agrees:
            return (f"{who} ({self.master}, {self.seconds:.1f} s) agree with numpy's: "
                    f"{len(COUNTED)} figures, {len(PHASES)} phase rows and "
                    f"{len(ANOMALIES)} anomaly sets, ID for ID{where}")
        shown = "; ".join(self.differences[:SHOWN_IDS])
        more = (f" and {len(self.differences) - SHOWN_IDS} more"
                if len(self.differences) > SHOWN_IDS else "")
        return (f"{who} ({self.master}) DISAGREE with numpy's on "
                f"{len(self.differences)} points: {shown}{more}{where}")

    def as_dict(self) -> dict[str, Any]:
        return {"master": self.master, "agrees": self.agrees, "differences": self.differences,
                "spark_oracle": self.spark_oracle,
                "seconds": round(self.seconds, 3), "guarantee": self.spark.guarantee,
                "counts": self.spark.counts(),
                "sets": None if self.sets is None else str(self.sets)}


def checker_conf(master: str, heap_mb: int = DEFAULT_HEAP_MB, kafka: bool = False,
                 conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The checker session's settings: ``master`` (``local[N]``, or a cluster's URL), no UI,
    UTC, pages small enough for a small heap (shuffle partitions are set per job from its
    size: :func:`pgval.scale.checker.fit_shuffle`), Spark's Kafka connector where ``kafka``
    (the read-back), then ``conf`` (how to join a cluster: its driver address, its secret)."""
    from pgval.host.jars import ensure_jars

    out = {"spark.master": master, "spark.app.name": "pgval-spark-checker",
           "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
           "spark.driver.memory": f"{int(heap_mb)}m", "spark.buffer.pageSize": "16m",
           "spark.sql.session.timeZone": "UTC"}
    if kafka:
        out["spark.jars"] = ensure_jars(spark=True).spark_jars_csv
    if master.startswith("local"):
        out.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    return {**out, **(conf or {})}


def checker_session(master: str, heap_mb: int = DEFAULT_HEAP_MB, kafka: bool = False
                    ) -> SparkSession:
    """A new Spark session for the checker in this process (:func:`checker_conf`); a missing
    pyspark or Java, or a session already active in this process (whose master and heap
    would be used instead), is one sentence."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UserMistake("the Spark checker needs pyspark: pip install 'pgval[spark]'"
                          ) from None
    from pgval.host.jars import check_java

    if SparkSession.getActiveSession() is not None:
        raise UserMistake("a Spark session is already active in this process: pass it as "
                          "spark= to judge on it, or stop it first")
    check_java()
    # Python workers (a job's value comparison) run this Python: PySpark reads the variable
    # once, as the session starts (else ``python3`` from PATH, which may lack pgval).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in checker_conf(master, heap_mb, kafka).items():
        builder = builder.config(key, value)
    # PySpark installs its own Ctrl-C handler for the process; pgval's stays in charge.
    handler = signal.getsignal(signal.SIGINT)
    try:
        session = spark_call(master, builder.getOrCreate)
    finally:
        signal.signal(signal.SIGINT, handler)
    session.sparkContext.setLogLevel("ERROR")  # its warnings are not the user's to read
    return session


def spark_call(master: str, fn: Callable[[], T]) -> T:
    """``fn()``, with a failure of Spark (a master it cannot reach, a job that failed, a heap
    run out) turned into one sentence."""
    try:
        return fn()
    except UserMistake:
        raise
    except Exception as exc:  # noqa: BLE001 - pyspark's and py4j's errors have no common base
        kind = type(exc).__module__.split(".")[0]
        if kind not in ("pyspark", "py4j"):
            raise
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise EnvironmentFailure(f"the Spark checker failed on {master}: {first[:300]}"
                                 ) from None


def is_local(master: str) -> bool:
    """A master whose executors share this machine's disk (``local``, ``local[N]``)."""
    return master == "local" or master.startswith("local[")


def _spark_frames(spark: SparkSession, folder: Path, expected: ExpectedOutputs,
                  outputs: OutputRecords, wrong_value: np.ndarray | None,
                  events: InputEvents | None) -> tuple[dict[str, Path], int | None]:
    """The checker's four tables, and the inputs the Spark oracle set aside as retries (None:
    no Spark oracle): the expected side from the Spark oracle where ``events`` are given (a
    built-in topology's), else from ``expected``'s columns (a job's batch rows)."""
    produced = write_produced(outputs, folder / "produced", wrong_value)
    if events is None:
        return {**write_expected(expected, folder / "expected"), **produced}, None
    inputs = write_inputs(events, folder / "inputs.parquet")
    made, duplicates = expected_on_spark(spark, inputs, expected.topology,
                                         expected.window_ms, folder / "expected")
    return {**made, **produced}, duplicates


def check_on_spark(expected: ExpectedOutputs, outputs: OutputRecords, phases: Phases | None,
                   wrong_value: np.ndarray | None, master: str = DEFAULT_MASTER,
                   keep: Path | None = None, spark: SparkSession | None = None,
                   events: InputEvents | None = None) -> SparkCheck:
    """Judge ``outputs`` against ``expected`` with both checkers and compare them.

    The columns are written as Parquet (:mod:`pgval.scale.frames`) into ``keep`` (or a
    temporary folder, removed after), which the Spark checker reads; its anomaly sets are
    written there too. With ``events`` (a built-in topology's inputs) the expected outputs
    are computed again by the Spark oracle (:mod:`pgval.scale.oracle`), so the comparison
    holds the oracle too. ``spark``: a session to use (else one on ``master``, stopped
    after)."""
    if spark is None and keep is None and not is_local(master):
        raise UserMistake(f"on {master} the Spark checker's executors must read its tables: "
                          "give --spark-out a folder on storage every executor shares")
    mine = validate(expected, outputs, phases, wrong_value=wrong_value)
    folder = keep if keep is not None else Path(tempfile.mkdtemp(prefix="pgval-spark-check-"))
    started = time.monotonic()
    try:
        session = checker_session(master) if spark is None else spark
        shuffle = session.conf.get("spark.sql.shuffle.partitions")
        try:
            frames, duplicates = spark_call(master, lambda: _spark_frames(
                session, folder, expected, outputs, wrong_value, events))
            theirs = spark_call(master, lambda: validate_on_spark(
                session, frames, expected.topology, phases, folder / "sets", outputs.malformed,
                values_compared=wrong_value is not None))
            theirs.duplicate_inputs = duplicates
            said = differences(mine, theirs, duplicate_inputs=expected.duplicate_inputs)
        finally:
            if spark is None:
                session.stop()
            else:  # a caller's session keeps its own setting
                session.conf.set("spark.sql.shuffle.partitions", shuffle)
    finally:
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return SparkCheck(master, theirs, said, time.monotonic() - started,
                      None if keep is None else folder / "sets", events is not None)


def check_evaluation(evaluation: Evaluation, master: str = DEFAULT_MASTER,
                     keep: Path | None = None, events: InputEvents | None = None
                     ) -> SparkCheck:
    """A judged run (``validate``'s or ``recheck``'s :class:`Evaluation`) judged again by the
    Spark checker on the same columns, phases and value check, and held to numpy's. With
    ``events`` (the run's input events) a built-in topology's expected outputs come from
    the Spark oracle; a job's always from its batch rows."""
    if evaluation.outputs is None:
        raise UserMistake("this evaluation kept no outputs for the Spark checker to judge")
    values = evaluation.values
    own_oracle = evaluation.expected.topology in (Topology.SST, Topology.MST)
    return check_on_spark(evaluation.expected, evaluation.outputs, evaluation.phases,
                          None if values is None else values.wrong, master, keep,
                          events=events if own_oracle else None)
