"""A user's own job: what ``--job PATH.py:FUNCTION`` (or ``package.module:FUNCTION``) names,
how it is loaded, and which jobs pgval can judge.

The job is one function::

    def build(spark: SparkSession, sources: Mapping[str, DataFrame]) -> DataFrame

``sources["get"]`` and ``sources["post"]`` are the generator's two streams, parsed by pgval
from Kafka exactly as for SST and MST: ``id`` (long), ``type`` (string), ``resource``
(string), ``event_ts`` (timestamp), plus ``partition`` and ``offset`` (which Kafka record a
row is, for jobs that must tell two records with one ID apart). The job returns a streaming
DataFrame with a column ``ids`` (array<long>): the input IDs that made the row. Every other
column is the job's own; the job sets its own watermark, windows and joins, and pgval writes
the result in append mode. ``build.key = ["col", …]`` declares the columns that identify an
output (one output per key is what the validator expects); without it every column but
``ids`` is the key.

Judged by Structured Streaming's own promise: the streaming result equals the same
``build`` run as a batch over the same input, less what the watermark drops. So the checks
here refuse, before anything starts and in one sentence, what that promise cannot cover: no
``ids`` column or one of another type, a key that names no column, a function that is not
one of two arguments. This module imports no pyspark: schemas arrive as ``(name, type)``
pairs (``field.dataType.simpleString()``), so the rules are tested without a JVM.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgval.core.errors import UserMistake
from pgval.job import wants_kafka

#: The column every job's output carries: the input IDs behind the row.
IDS = "ids"
#: The Spark types ``ids`` may have (``array<int>`` is widened when read).
IDS_TYPES = ("array<bigint>", "array<int>")
#: The names of the streams a job gets.
SOURCES = ("get", "post")
#: The columns of each source, in order, as Spark names their types.
SOURCE_COLUMNS = (("id", "bigint"), ("type", "string"), ("resource", "string"),
                  ("event_ts", "timestamp"), ("partition", "int"), ("offset", "bigint"))
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


#: What a missing package is told with (the job's import, or a Python worker's).
MISSING_PACKAGE = ("a Python package the Python running pgval and Spark's Python workers "
                   f"({sys.executable}) does not have: install {{name}} there")
_NO_MODULE = re.compile(r"No module named '([^']+)'|cannot import name '\w+' from "
                        r"'([\w.]+)' \(unknown location\)")


def missing_package(text: str) -> str | None:
    """The package a failure's text says is missing (a Python worker's ImportError), or
    None."""
    found = _NO_MODULE.search(text)
    if not found:
        return None
    return found.group(1).split(".")[0] if found.group(1) else found.group(2)


class JobError(UserMistake):
    """A job pgval cannot load or judge (one sentence: exit 2, bad input)."""


class NeedsSession(JobError):
    """A job file whose module-level code needs a Spark session (a UDF declared with a
    type string, a read of ``spark.conf``): it loads where one runs, as under
    spark-submit, and is checked by its syntax before (:func:`check_file`)."""


def needs_session(exc: BaseException) -> bool:
    """An import failed only because no Spark session was running."""
    text = str(exc)
    return ("SparkContext or SparkSession should be created first" in text
            or "SparkSession should be created" in text
            or type(exc).__name__ in ("PySparkRuntimeError",) and "SESSION" in text.upper())


@dataclass(frozen=True)
class JobRef:
    """``PATH.py:FUNCTION`` or ``package.module:FUNCTION``, as given on the command line."""

    target: str
    function: str

    @classmethod
    def parse(cls, text: str, option: str = "--job") -> JobRef:
        target, sep, function = text.strip().rpartition(":")
        if not sep or not target or not function.isidentifier():
            raise JobError(f"{option} {text!r}: expected PATH.py:FUNCTION or "
                           "package.module:FUNCTION")
        if not target.endswith(".py") and not _MODULE.fullmatch(target):
            raise JobError(f"{option} {text!r}: {target!r} is neither a .py file nor a "
                           "module name")
        return cls(target, function)

    @property
    def is_file(self) -> bool:
        return self.target.endswith(".py")

    def __str__(self) -> str:
        return f"{self.target}:{self.function}"


@dataclass(frozen=True)
class Job:
    """A loaded job: its ``build`` function and declared key (None: every column but ids)."""

    ref: JobRef
    build: Callable[..., Any]
    key: tuple[str, ...] | None = None
    #: ``build(spark, kafka)``: the job reads Kafka itself (:mod:`pgval.job`), its IDs are
    #: the records' coordinates; else ``build(spark, sources)`` over the parsed web log.
    reads_kafka: bool = False
    #: ``build.trigger``: the job's own trigger (``real-time:5 seconds``), or None.
    trigger: str | None = None
    #: ``build.tolerance``: the relative tolerance of non-integer numbers when the outputs'
    #: values are compared with the batch's (None: :data:`pgval.oracle.values.DEFAULT_TOLERANCE`).
    tolerance: float | None = None

    def key_columns(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The output's key among ``columns`` (the declared one, else all but ``ids``)."""
        if self.key is not None:
            return self.key
        return tuple(c for c in columns if c != IDS)


def import_module(ref: JobRef, option: str = "--job") -> Any:
    """The module ``ref`` names: a file loaded under a private name, or an importable module
    (``option``: the command-line option that named it, for the one-sentence errors)."""
    if ref.is_file:
        path = Path(ref.target)
        if not path.is_file():
            raise JobError(f"{option} {ref}: no such file {path}")
        name = f"pgval_job_{abs(hash(str(path.resolve())))}"
        # Modules beside the job's file import as they would when the user runs it there.
        if str(path.resolve().parent) not in sys.path:
            sys.path.append(str(path.resolve().parent))
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise JobError(f"{option} {ref}: cannot load {path} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise JobError(f"{option} {ref}: {path} line {exc.lineno}: {exc.msg}") from exc
        except Exception as exc:  # the user's module failed while importing
            if isinstance(exc, ModuleNotFoundError) and exc.name:
                raise JobError(f"{option} {ref}: {path} imports {exc.name}, "
                               f"{MISSING_PACKAGE.format(name=exc.name)}") from exc
            if needs_session(exc):
                raise NeedsSession(f"{option} {ref}: {path} needs a Spark session to load "
                                   f"({exc})") from exc
            raise JobError(f"{option} {ref}: importing {path} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(ref.target)
    except ModuleNotFoundError as exc:
        raise JobError(f"{option} {ref}: no module {exc.name} (is it on PYTHONPATH?)") from exc
    except Exception as exc:
        raise JobError(f"{option} {ref}: importing {ref.target} failed: "
                       f"{type(exc).__name__}: {exc}") from exc


def source_file(ref: JobRef | str) -> Path | None:
    """The file a job's code is in (kept with the run's evidence): the ``.py`` named, or
    the module's source; None when there is no single file (a namespace package)."""
    ref = JobRef.parse(ref) if isinstance(ref, str) else ref
    if ref.is_file:
        return Path(ref.target)
    try:
        spec = importlib.util.find_spec(ref.target)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def load(ref: JobRef | str) -> Job:
    """Import the job and check its shape: a function of (spark, sources) and, if declared,
    a key that is a list of column names other than ``ids``."""
    ref = JobRef.parse(ref) if isinstance(ref, str) else ref
    module = import_module(ref)
    build = getattr(module, ref.function, None)
    if build is None:
        raise JobError(f"--job {ref}: {ref.target} has no {ref.function}")
    if not callable(build):
        raise JobError(f"--job {ref}: {ref.function} is not a function")
    try:
        sig = inspect.signature(build)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        try:
            sig.bind(object(), object())
        except TypeError as exc:
            raise JobError(f"--job {ref}: {ref.function}{sig} must take two arguments, "
                           "(spark, kafka) or (spark, sources)") from exc
    return Job(ref, build, _key(ref, getattr(build, "key", None)),
               sig is not None and wants_kafka(list(sig.parameters)),
               _trigger(ref, getattr(build, "trigger", None)),
               _tolerance(ref, getattr(build, "tolerance", None)))


def _tolerance(ref: JobRef, tolerance: Any) -> float | None:
    """``build.tolerance`` checked: a relative tolerance from 0 (exact) below 1."""
    if tolerance is None:
        return None
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (
            0 <= tolerance < 1):
        raise JobError(f"--job {ref}: {ref.function}.tolerance must be a number from 0 "
                       f"(values compared exactly) below 1, not {tolerance!r}")
    return float(tolerance)


def _trigger(ref: JobRef, trigger: Any) -> str | None:
    """``build.trigger`` checked (:func:`pgval.core.schema.parse_trigger`)."""
    if trigger is None:
        return None
    from pgval.core.schema import parse_trigger

    try:
        parse_trigger(str(trigger))
    except ValueError as exc:
        raise JobError(f"--job {ref}: {ref.function}.{exc}") from None
    return str(trigger)


def _key(ref: JobRef, key: Any) -> tuple[str, ...] | None:
    """``build.key`` checked: a non-empty list of column names other than ``ids``."""
    if key is not None:
        if isinstance(key, str) or not isinstance(key, Sequence) or not key or not all(
                isinstance(k, str) and k for k in key):
            raise JobError(f"--job {ref}: {ref.function}.key must be a non-empty list of "
                           f"column names, not {key!r}")
        if IDS in key:
            raise JobError(f"--job {ref}: {ref.function}.key names {IDS!r}, the column of "
                           "input IDs; the key is what identifies an output")
        key = tuple(key)
    return key


def check_file(ref: JobRef | str) -> Job:
    """A job file checked by its syntax alone, for a file that loads only with a Spark
    session: it parses, defines the function with two parameters, and a literal
    ``FUNCTION.key`` is a list of names. The returned job's ``build`` is a placeholder; the
    driver and the batch oracle load the file for real, in their sessions."""
    import ast

    ref = JobRef.parse(ref) if isinstance(ref, str) else ref
    path = Path(ref.target)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise JobError(f"--job {ref}: {path} line {exc.lineno}: {exc.msg}") from exc
    except OSError as exc:
        raise JobError(f"--job {ref}: cannot read {path} ({exc.strerror})") from exc
    found = next((n for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                          ast.AsyncFunctionDef))
                  and n.name == ref.function), None)
    if found is None:
        raise JobError(f"--job {ref}: {ref.target} has no function {ref.function}")
    params = [a.arg for a in (*found.args.posonlyargs, *found.args.args)]
    if len(params) < 2 and found.args.vararg is None:
        raise JobError(f"--job {ref}: {ref.function}({', '.join(params)}) must take two "
                       "arguments, (spark, kafka) or (spark, sources)")
    found_attrs: dict[str, Any] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute)
                and node.targets[0].attr in ("key", "trigger")
                and isinstance(node.targets[0].value, ast.Name)
                and node.targets[0].value.id == ref.function):
            # A computed value is checked by the driver once loaded.
            with contextlib.suppress(ValueError):
                found_attrs[node.targets[0].attr] = ast.literal_eval(node.value)
    return Job(ref, lambda *_: None, _key(ref, found_attrs.get("key")), wants_kafka(params),
               _trigger(ref, found_attrs.get("trigger")))


def load_or_check(ref: JobRef | str) -> Job:
    """:func:`load`, or for a file that needs a session to load, :func:`check_file`."""
    try:
        return load(ref)
    except NeedsSession:
        return check_file(ref)


def check_output(job: Job, schema: Sequence[tuple[str, str]], streaming: bool | None = True
                 ) -> tuple[str, ...]:
    """Refuse an output pgval cannot judge; else its key columns. ``schema``: the result's
    ``(name, simpleString type)`` pairs; ``streaming``: ``DataFrame.isStreaming`` (None:
    the job's batch run, which is not streaming by design)."""
    where = f"--job {job.ref}"
    if streaming is False:
        raise JobError(f"{where}: the result is not a streaming DataFrame (build it from "
                       "sources, not from a batch read alone)")
    names = [n for n, _ in schema]
    types = dict(schema)
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise JobError(f"{where}: the result has two columns named {', '.join(dupes)}")
    if IDS in types and types[IDS] not in IDS_TYPES:
        raise JobError(f"{where}: {IDS!r} is {types[IDS]}, not array<bigint> (collect the "
                       "input IDs, e.g. F.collect_list('id'))")
    key = job.key_columns(names)
    inexact = [k for k in key if types.get(k, "").split("(")[0] in ("double", "float")]
    if job.key is not None and inexact:
        raise JobError(f"{where}: build.key names {', '.join(inexact)}, which is "
                       "floating-point: a value computed in the stream and in the batch run "
                       "can differ in its last digits, so it cannot identify an output (key "
                       "by what identifies it, a window or an ID; a double is compared as a "
                       "value, within build.tolerance)")
    if job.key is None and inexact:
        raise JobError(f"{where}: without build.key every column but {IDS!r} is the key, and "
                       f"{', '.join(inexact)} is floating-point: a sum or an average can "
                       "differ in its last digits between the stream and the batch run, so "
                       "a correct output would count as wrong (declare build.key, the columns "
                       "that identify an output)")
    missing = [k for k in key if k not in types]
    if missing:
        raise JobError(f"{where}: the key names {', '.join(missing)}, which the result does "
                       f"not have (it has {', '.join(names)})")
    if not key:
        raise JobError(f"{where}: the result has only {IDS!r}: nothing says which output a "
                       "row is (add the columns that identify it)")
    return key


def has_ids(schema: Sequence[tuple[str, str]]) -> bool:
    """The result carries ``ids`` (judged ID by ID); without, it is judged by its rows."""
    return any(name == IDS for name, _ in schema)


#: Functions whose value depends on when or where a row is computed (Spark's SQL names, as
#: an analyzed plan prints them): a batch re-run of the job cannot give the rows the stream
#: gave, so a job using one cannot be judged by its batch run.
NOT_REPEATABLE = ("current_timestamp", "current_date", "now", "localtimestamp",
                  "current_timezone", "rand", "randn", "uuid", "shuffle",
                  "monotonically_increasing_id", "spark_partition_id",
                  "input_file_name", "current_batch_id")
#: Aggregates whose value depends on the order rows arrive in (``first``, ``last``,
#: ``any_value``: Spark documents them as non-deterministic), which a stream and its batch
#: run do not share: the batch run cannot say which row the stream should have kept.
ORDER_DEPENDENT = ("first", "last", "any_value")
_CALL = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join((*NOT_REPEATABLE, *ORDER_DEPENDENT))
                   + r")\(")


def not_repeatable(plan: str) -> str | None:
    """The first function of :data:`NOT_REPEATABLE` or :data:`ORDER_DEPENDENT` an analyzed
    plan calls, or None."""
    found = _CALL.search(plan)
    return found.group(1) if found else None


def check_result(job: Job, result: Any, streaming: bool | None) -> tuple[str, ...]:
    """:func:`check_output` on what ``build`` returned (a DataFrame, or one sentence); the
    key columns. ``streaming``: as :func:`check_output`'s. A plan that calls a function
    whose value a re-run would not repeat (:data:`NOT_REPEATABLE`) is refused too."""
    fields = getattr(getattr(result, "schema", None), "fields", None)
    if fields is None:
        raise JobError(f"--job {job.ref}: build returned {type(result).__name__}, not a "
                       "DataFrame")
    key = check_output(job, [(f.name, f.dataType.simpleString()) for f in fields], streaming)
    try:
        plan = str(result._jdf.queryExecution().analyzed().toString())
    except Exception:  # not a JVM-backed DataFrame (a test's stand-in): nothing to read
        plan = ""
    if problem := operator_problem(plan):
        raise JobError(f"--job {job.ref}: {problem}")
    if (name := not_repeatable(plan)) in ORDER_DEPENDENT:
        raise JobError(f"--job {job.ref}: the job calls {name}(), whose value depends on the "
                       "order rows arrive in, which the stream and its batch run, the oracle, "
                       "do not share (use min, max, max_by of the event time, or "
                       "collect_list)")
    if name is not None:
        raise JobError(f"--job {job.ref}: the job calls {name}(), whose value a re-run does "
                       "not repeat: its batch run, the oracle, cannot give the rows the stream "
                       "gave (use the event time, and no randomness)")
    return key


#: Stateful operators whose timers fire on the stream's clock or watermark, which a batch
#: run does not have (Spark's plan names, then the timeout or time mode that needs one):
#: their batch run, the oracle, cannot say what the stream should have written.
_TIMED = re.compile(r"(FlatMapGroupsWithState|FlatMapGroupsInPandasWithState)\b.*\b"
                    r"(ProcessingTimeTimeout|EventTimeTimeout)\b|"
                    r"(TransformWithState\w*)\b.*, (ProcessingTime|EventTime),")
_TIMED_NAMES = {"FlatMapGroupsWithState": "flatMapGroupsWithState",
                "FlatMapGroupsInPandasWithState": "applyInPandasWithState"}


def operator_problem(plan: str) -> str | None:
    """What the operator table (docs/your-job.md) refuses in an analyzed streaming plan,
    as one sentence naming the operator, or None."""
    for line in plan.splitlines():
        found = _TIMED.search(line)
        if not found:
            continue
        if found.group(1):
            name, timer = _TIMED_NAMES[found.group(1)], f"uses {found.group(2)}"
        else:
            name, timer = "transformWithState", f"runs in TimeMode {found.group(4)}"
        return (f"the job's {name} {timer}: its timers (and TTL) go by the stream's clock "
                "or watermark, which its batch run, the oracle, does not have, so it cannot "
                "say what they should have written (use NoTimeout / TimeMode None, and end "
                "a group's state by its events)")
    return None


def fan_out_operator(plan: str) -> str | None:
    """The operator that can put one input into several outputs, as a user names it
    (a sliding window, explode, a join), or None; for the sentence that refuses a
    fan-out the batch run shows."""
    found = []
    if re.search(r"^\W*Expand \[.*\bwindow#", plan, re.MULTILINE):
        found.append("a sliding window (one event in every window that covers it)")
    if gen := re.search(r"^\W*Generate ((?:pos)?explode(?:_outer)?|inline(?:_outer)?)\(",
                        plan, re.MULTILINE):
        found.append(f"{gen.group(1)} (one input in each row it makes)")
    if re.search(r"^\W*Join (?!LeftSemi|LeftAnti)\w+", plan, re.MULTILINE):
        found.append("a join (one input matched with several rows)")
    return found[0] if len(found) == 1 else None  # several: none named, to be sure
