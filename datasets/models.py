"""Input models: the user's own records, made at the run's rate, in the user's own format.

The web log is pgval's default input; a user's job reads records of its own. An input model
names the inputs the job reads (at most two, the run's two input topics) and how each
one's records are made:

* **replay**: a sample of real records (``--replay NAME=SAMPLE.jsonl``, or an Avro
  object container file ``SAMPLE.avro``), sent in a loop; the event-time field
  (``--event-time-field FIELD``) is re-stamped to the time of sending, in the record's own
  format (epoch milliseconds, ISO text, or an Avro timestamp);
* **make**: a function (``--input NAME=FILE.py:make``): ``make(i, rng, event_ms) -> dict``
  makes record ``i`` with a ``random.Random`` seeded by the run's seed and ``i``, and the
  event time pgval intends.

Each Kafka value is one record in the input's format: a JSON object by default; with
``--avro-schema NAME=FILE.avsc`` (or a ``.avro`` sample, which carries its own schema) one
Avro datum in plain Avro binary encoding, what Spark's ``from_avro(value, schema)`` reads
(not the Schema Registry's wire format, whose five-byte header ``from_avro`` does not
strip). Every record is checked against the schema when the model is loaded.

On either, the shape a streaming job meets in production: key skew on a named field
(``--skew FIELD=zipf:S``: the field's value drawn from the values the input shows, the
k-th most common with weight 1/k^S, and the field's value is the record's Kafka key),
event-time disorder (``--disorder SHARE:MAX_MS``: that share of records carries an event
time up to MAX_MS in the past) and late records (``--late SHARE:MS``: that share carries an
event time exactly MS in the past). Every draw is a function of the seed and the record
number, so a run's records are the same whichever producer makes them.

``--inputs-spec FILE.toml`` holds all of it in one file (paths relative to the file)::

    seed = 7
    [inputs.orders]
    replay = "orders.jsonl"          # or: make = "orders.py:make"
    event_time_field = "ts"
    avro_schema = "orders.avsc"      # optional: the values in Avro, not JSON
    [shape]
    skew = { customer = "zipf:1.2" }
    disorder = "0.2:5000"
    late = "0.01:60000"

pgval's own events (priming, closing) are records of the same model sent with the Kafka
key :data:`OWN_KEY`; the evidence sets them aside by that key.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import random
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
from fastavro.validation import ValidationError, validate

from pgval.core.errors import UserMistake

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: The most inputs a model has: the run's two input topics.
MAX_INPUTS = 2
#: How many records a ``make`` input makes up front to learn a skewed field's values.
SKEW_POOL = 1_000
_SAMPLE_LIMIT_BYTES = 256 << 20


class InputModelError(UserMistake):
    """An input model pgval cannot use (one sentence, exit 2)."""


@dataclass(frozen=True)
class InputSource:
    """One named input: a replayed sample or a ``make`` function (``FILE.py:FUNCTION``)."""

    name: str
    kind: str  # "replay" | "make"
    source: str
    event_time_field: str | None = None
    #: An Avro schema file (``.avsc``): the records are Avro, not JSON.
    avro_schema: str | None = None

    @property
    def avro(self) -> bool:
        """Whether the records are Avro (a schema given, or a ``.avro`` sample)."""
        return self.avro_schema is not None or (self.kind == "replay"
                                                and self.source.endswith(".avro"))

    def to_record(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "source": self.source,
                "event_time_field": self.event_time_field, "avro_schema": self.avro_schema}


@dataclass(frozen=True)
class InputModel:
    """The inputs and their shape; parsed and checked, not yet loaded."""

    inputs: tuple[InputSource, ...]
    skew: tuple[tuple[str, float], ...] = ()
    disorder: tuple[float, int] | None = None
    late: tuple[float, int] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.inputs)

    def to_record(self) -> dict[str, Any]:
        """The model as run.json keeps it."""
        return {"inputs": [s.to_record() for s in self.inputs],
                "skew": {f: s for f, s in self.skew},
                "disorder": list(self.disorder) if self.disorder else None,
                "late": list(self.late) if self.late else None}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> InputModel:
        return cls(tuple(InputSource(**s) for s in data["inputs"]),
                   tuple((str(f), float(s)) for f, s in (data.get("skew") or {}).items()),
                   tuple(data["disorder"]) if data.get("disorder") else None,  # type: ignore[arg-type]
                   tuple(data["late"]) if data.get("late") else None)  # type: ignore[arg-type]


# ------------------------------------------------------------------ parsing the options
def _share_ms(text: str, option: str) -> tuple[float, int]:
    share, sep, ms = str(text).partition(":")
    try:
        value = (float(share), int(ms))
    except ValueError:
        value = None
    if not sep or value is None or not 0.0 <= value[0] <= 1.0 or value[1] <= 0:
        raise InputModelError(f"{option} {text!r}: expected SHARE:MS, a share from 0 to 1 "
                              "and a positive number of milliseconds")
    return value


def _zipf(field_name: str, text: str) -> tuple[str, float]:
    kind, sep, s = str(text).partition(":")
    try:
        exponent = float(s)
    except ValueError:
        exponent = -1.0
    if kind != "zipf" or not sep or not exponent > 0 or not math.isfinite(exponent):
        raise InputModelError(f"--skew {field_name}={text}: expected FIELD=zipf:S with S a "
                              "positive number (1.0: the k-th value has weight 1/k)")
    return field_name, exponent


def _name(name: str, option: str) -> str:
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise InputModelError(f"{option}: {name!r} is not an input name (letters, digits, "
                              "- and _)")
    return name


def model_from_options(replay: Mapping[str, str], make: Mapping[str, str],
                       event_time_field: str | None, skew: Mapping[str, str],
                       disorder: str | None, late: str | None,
                       spec_file: str | None,
                       avro_schema: Mapping[str, str] | None = None) -> InputModel | None:
    """The model the command line asks for (None: the web log); a spec file and the
    options together are refused, so one place says what a run sends."""
    avro_schema = avro_schema or {}
    given = bool(replay or make or skew or disorder or late or event_time_field
                 or avro_schema)
    if spec_file:
        if given:
            raise InputModelError("--inputs-spec holds the whole input model: give it alone, "
                                  "without --replay, --input, --skew, --disorder, --late, "
                                  "--event-time-field or --avro-schema")
        return model_from_toml(Path(spec_file))
    if not (replay or make):
        if given:
            raise InputModelError("--skew, --disorder, --late, --event-time-field and "
                                  "--avro-schema shape an input model: give --replay "
                                  "NAME=SAMPLE.jsonl or --input NAME=FILE.py:make too")
        return None
    both = set(replay) & set(make)
    if both:
        raise InputModelError(f"input {sorted(both)[0]!r} is named by --replay and --input")
    unknown = set(avro_schema) - set(replay) - set(make)
    if unknown:
        raise InputModelError(f"--avro-schema {sorted(unknown)[0]}: no input of that name "
                              "(name it with --replay or --input too)")
    inputs = [InputSource(_name(n, "--replay"), "replay", str(p), event_time_field,
                          avro_schema.get(n)) for n, p in replay.items()]
    inputs += [InputSource(_name(n, "--input"), "make", str(p), None, avro_schema.get(n))
               for n, p in make.items()]
    return _checked(InputModel(tuple(inputs), tuple(_zipf(f, s) for f, s in skew.items()),
                               _share_ms(disorder, "--disorder") if disorder else None,
                               _share_ms(late, "--late") if late else None))


def model_from_toml(path: Path) -> InputModel:
    """The model of an ``--inputs-spec`` file (see the module's docstring)."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise InputModelError(f"--inputs-spec {path}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputModelError(f"--inputs-spec {path}: not TOML ({exc})") from None
    unknown = set(data) - {"inputs", "shape"}
    if unknown or not isinstance(data.get("inputs"), dict) or not data["inputs"]:
        extra = f"; unknown {', '.join(sorted(unknown))}" if unknown else ""
        raise InputModelError(f"--inputs-spec {path}: expected [inputs.NAME] tables and an "
                              f"optional [shape]{extra}")
    base = path.resolve().parent
    inputs = []
    for name, table in data["inputs"].items():
        if not isinstance(table, dict) or len({"replay", "make"} & set(table)) != 1 or set(
                table) - {"replay", "make", "event_time_field", "avro_schema"}:
            raise InputModelError(f"--inputs-spec {path}: [inputs.{name}] takes replay = "
                                  "FILE or make = FILE.py:FUNCTION, event_time_field and "
                                  "avro_schema")
        kind = "replay" if "replay" in table else "make"
        source = str(table[kind])
        source = str(base / source) if not Path(source).is_absolute() else source
        schema = table.get("avro_schema")
        if schema is not None and not Path(str(schema)).is_absolute():
            schema = str(base / str(schema))
        inputs.append(InputSource(_name(name, "--inputs-spec"), kind, source,
                                  table.get("event_time_field"),
                                  None if schema is None else str(schema)))
    shape = data.get("shape") or {}
    if not isinstance(shape, dict) or set(shape) - {"skew", "disorder", "late"}:
        raise InputModelError(f"--inputs-spec {path}: [shape] takes skew, disorder and late")
    return _checked(InputModel(
        tuple(inputs), tuple(_zipf(f, s) for f, s in (shape.get("skew") or {}).items()),
        _share_ms(shape["disorder"], "disorder") if shape.get("disorder") else None,
        _share_ms(shape["late"], "late") if shape.get("late") else None))


def _checked(model: InputModel) -> InputModel:
    if len(model.inputs) > MAX_INPUTS:
        raise InputModelError(f"an input model has at most {MAX_INPUTS} inputs (the run's two "
                              f"input topics); {len(model.inputs)} given")
    prepared = PreparedModel(model, seed=0)  # loads every sample and function once
    for field_name, _ in model.skew:
        for stream in prepared.streams:
            if not stream.skew_values.get(field_name):
                raise InputModelError(f"--skew {field_name}: input {stream.source.name!r} has "
                                      f"no records with a field {field_name!r}")
    return model


# ------------------------------------------------------------------ making records
def _load_schema(source: InputSource) -> dict[str, Any]:
    """The input's Avro schema file, parsed: a record schema, or one sentence."""
    where = f"--avro-schema {source.name}={source.avro_schema}"
    try:
        text = Path(str(source.avro_schema)).read_text()
    except OSError as exc:
        raise InputModelError(f"{where}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputModelError(f"{where}: not a schema (.avsc is JSON text)") from None
    try:
        schema = fastavro.parse_schema(json.loads(text))
    except ValueError as exc:  # JSON or schema errors (fastavro's are ValueErrors too)
        raise InputModelError(f"{where}: not an Avro schema ({_short(exc)})") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise InputModelError(f"{where}: the schema of a record must be of type record")
    return schema


def _short(exc: Exception, limit: int = 240) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "…"


def _read_avro_sample(source: InputSource, path: Path, schema: dict[str, Any] | None
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """An Avro object container file's records (resolved to ``schema`` where given) and
    the schema they are written with."""
    where = f"--replay {source.name}={path}"
    try:
        with path.open("rb") as f:
            reader = fastavro.reader(f, reader_schema=schema)
            records = list(reader)
            written = schema or fastavro.parse_schema(reader.writer_schema)
    except OSError as exc:
        raise InputModelError(f"{where}: cannot read it ({exc.strerror})") from None
    except Exception as exc:  # fastavro's errors on a file that is not Avro or resolves not
        raise InputModelError(f"{where}: not an Avro object container file of this schema "
                              f"({_short(exc)})") from None
    if not isinstance(written, dict) or written.get("type") != "record" or not all(
            isinstance(r, dict) for r in records):
        raise InputModelError(f"{where}: its records are not Avro records")
    return records, written


def _logical(kind: Any) -> str | None:
    """A field type's logical type, looking through a union with null."""
    for one in kind if isinstance(kind, list) else [kind]:
        if isinstance(one, dict) and one.get("logicalType"):
            return str(one["logicalType"])
    return None


def _avro_values(record: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON record's top-level values in the Python types fastavro writes for the
    schema's logical types: a decimal from a number or text, a timestamp from ISO text or
    epoch milliseconds, a date from ISO text. Anything else is left for the schema check."""
    out = dict(record)
    for f in schema["fields"]:
        value, logical = out.get(f["name"]), _logical(f["type"])
        if value is None or logical is None:
            continue
        try:
            if logical == "decimal" and isinstance(value, (int, float, str)):
                out[f["name"]] = Decimal(str(value))
            elif logical.endswith(("timestamp-millis", "timestamp-micros")):
                if isinstance(value, str):
                    value = datetime.fromisoformat(value.replace("Z", "+00:00"))
                elif isinstance(value, int) and not isinstance(value, bool):
                    value = datetime.fromtimestamp(value / 1000, timezone.utc)
                if isinstance(value, datetime) and value.tzinfo is None:
                    # fastavro writes a naive time in the host's zone; JSON means UTC
                    value = value.replace(tzinfo=timezone.utc)
                out[f["name"]] = value
            elif logical == "date" and isinstance(value, str):
                out[f["name"]] = date.fromisoformat(value)
        except (ValueError, ArithmeticError):
            pass  # the schema check names the record
    return out


def _load_sample(source: InputSource, schema: dict[str, Any] | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The sample's records, and the Avro schema they are sent with (None: JSON)."""
    path = Path(source.source)
    try:
        if path.stat().st_size > _SAMPLE_LIMIT_BYTES:
            raise InputModelError(f"--replay {source.name}={path}: larger than 256 MiB; a "
                                  "sample is replayed in a loop, so a part of it will do")
        if path.suffix == ".avro":
            records, schema = _read_avro_sample(source, path, schema)
            if not records:
                raise InputModelError(f"--replay {source.name}={path}: the sample has no "
                                      "records")
            return records, schema
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise InputModelError(f"--replay {source.name}={path}: cannot read it "
                              f"({exc.strerror})") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise InputModelError(f"--replay {source.name}={path}: line {number} is not a "
                                  "JSON object")
        records.append(record)
    if not records:
        raise InputModelError(f"--replay {source.name}={path}: the sample has no records")
    if schema is not None:
        records = [_avro_values(r, schema) for r in records]
    field_name = source.event_time_field
    if field_name is not None and schema is None:
        bad = next((k for k, r in enumerate(records, 1) if _time_format(r.get(field_name))
                    is None), None)
        if bad is not None:
            raise InputModelError(f"--replay {source.name}={path}: record {bad} has no event "
                                  f"time in {field_name!r} (epoch milliseconds or ISO text)")
    return records, schema


#: Avro types of an event-time field, and the format pgval writes it in.
_AVRO_TIME_FORMATS = {"timestamp-millis": "datetime", "timestamp-micros": "datetime",
                      "local-timestamp-millis": "datetime",
                      "local-timestamp-micros": "datetime", "long": "ms", "string": "iso-z"}


def _avro_time_format(source: InputSource, schema: Mapping[str, Any]) -> str:
    """How the schema writes the event-time field: an Avro timestamp, a long (epoch
    milliseconds) or a string (ISO text); a union with null counts as its other type."""
    field_name = source.event_time_field
    found = next((f for f in schema["fields"] if f["name"] == field_name), None)
    if found is None:
        raise InputModelError(f"--event-time-field {field_name}: input {source.name!r}'s "
                              f"Avro schema has no field {field_name!r}")
    kinds = found["type"] if isinstance(found["type"], list) else [found["type"]]
    for kind in kinds:
        if kind == "null":
            continue
        name = (kind.get("logicalType") or kind.get("type")) if isinstance(kind, dict) else kind
        if name in _AVRO_TIME_FORMATS:
            return _AVRO_TIME_FORMATS[name]
    raise InputModelError(f"--event-time-field {field_name}: input {source.name!r}'s Avro "
                          f"field is {json.dumps(found['type'])}; pgval re-stamps a "
                          "timestamp-millis or -micros, a long (epoch milliseconds) or a "
                          "string (ISO text)")


def _load_make(source: InputSource) -> Callable[[int, random.Random, int], Any]:
    target, sep, function = source.source.rpartition(":")
    where = f"--input {source.name}={source.source}"
    if not sep or not target.endswith(".py") or not function.isidentifier():
        raise InputModelError(f"{where}: expected FILE.py:FUNCTION")
    path = Path(target)
    if not path.is_file():
        raise InputModelError(f"{where}: no such file {path}")
    name = f"pgval_input_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise InputModelError(f"{where}: cannot load {path} as Python")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's module failed while importing
            raise InputModelError(f"{where}: importing {path} failed: "
                                  f"{type(exc).__name__}: {exc}") from None
        sys.modules[name] = module
    make = getattr(module, function, None)
    if not callable(make):
        raise InputModelError(f"{where}: {path} has no function {function}")
    return make


def _time_format(value: Any) -> str | None:
    """How a record writes its event time: ``ms`` (an integer), ``iso`` / ``iso-z`` (text,
    ending in an offset or Z), ``datetime`` (an Avro timestamp, as fastavro reads it), or
    None when it is none of them."""
    if isinstance(value, datetime):
        return "datetime"
    if isinstance(value, int) and not isinstance(value, bool):
        return "ms"
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return "iso-z" if value.endswith("Z") else "iso"
    return None


def format_time(event_ms: int, fmt: str) -> int | str | datetime:
    """``event_ms`` in a record's own format (:func:`_time_format`), to the millisecond."""
    if fmt == "ms":
        return int(event_ms)
    if fmt == "datetime":
        return datetime.fromtimestamp(event_ms / 1000, timezone.utc)
    text = datetime.fromtimestamp(event_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z") if fmt == "iso-z" else text


def zipf_ranks(uniform: np.ndarray, n: int, exponent: float) -> np.ndarray:
    """Ranks 0..n-1 from uniform draws, rank k with weight 1/(k+1)^exponent."""
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(weights) / weights.sum()
    return np.minimum(np.searchsorted(cdf, uniform, side="right"), n - 1)


def uniforms(seed: int, stream: int, ids: np.ndarray) -> np.ndarray:
    """One uniform draw in [0, 1) per record number, for draw ``stream`` of ``seed``."""
    z = (np.asarray(ids, dtype=np.int64).astype(np.uint64)
         + np.uint64((seed * 0x9E3779B1 + stream * 0x85EBCA77) & ((1 << 64) - 1)))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@dataclass
class _Stream:
    source: InputSource
    sample: list[dict[str, Any]] = field(default_factory=list)
    make: Callable[[int, random.Random, int], Any] | None = None
    time_format: str | None = None
    #: The parsed Avro schema the records are written with (None: JSON).
    schema: dict[str, Any] | None = None
    #: Per skewed field, its values, most common first.
    skew_values: dict[str, list[Any]] = field(default_factory=dict)

    def encode(self, record: Mapping[str, Any], number: int = 0) -> bytes:
        """A record as its Kafka value: compact JSON, or one Avro datum; a record the
        schema cannot write (a later ``make`` record than those checked) is one sentence
        naming it (``number``)."""
        if self.schema is None:
            return json.dumps(record, separators=(",", ":")).encode()
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self.schema, record)
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
            raise InputModelError(f"input {self.source.name!r}: record {number} does not "
                                  f"match the Avro schema ({_short(exc)})") from None
        return out.getvalue()

    def check(self, records: Sequence[Mapping[str, Any]], what: str) -> None:
        """Refuse, naming the first, records the input's Avro schema cannot write."""
        if self.schema is None:
            return
        for number, record in enumerate(records, 1):
            try:
                validate(record, self.schema, raise_errors=True)
                problem = _decimal_problem(record, self.schema)
            except ValidationError as exc:
                problem = "; ".join(map(str, getattr(exc, "errors", None) or [exc]))
            except (ValueError, TypeError, ArithmeticError) as exc:  # e.g. a decimal's scale
                problem = str(exc)
            if problem:
                raise InputModelError(f"{what}: record {number} does not match the Avro "
                                      f"schema ({_short(Exception(problem))})")


def _decimal_problem(record: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """A top-level decimal with more digits than its precision allows (fastavro writes it;
    Spark's ``from_avro`` fails the query on it), said; else None."""
    for f in schema["fields"]:
        kinds = f["type"] if isinstance(f["type"], list) else [f["type"]]
        spec = next((k for k in kinds if isinstance(k, dict)
                     and k.get("logicalType") == "decimal"), None)
        value = record.get(f["name"])
        if spec is None or not isinstance(value, Decimal):
            continue
        digits = len(str(abs(int(value.scaleb(int(spec.get("scale", 0)))))))
        if digits > int(spec["precision"]):
            return (f"{f['name']} is {value}: more than the {spec['precision']} digits of "
                    f"decimal({spec['precision']},{spec.get('scale', 0)})")
    return None


def _value_key(value: Any) -> str:
    """A field's value as hashable text (Avro values may be bytes, decimals, times)."""
    return json.dumps(value, sort_keys=True, default=repr)


class PreparedModel:
    """A model with its samples and functions loaded: makes the records of a run."""

    def __init__(self, model: InputModel, seed: int) -> None:
        self.model = model
        self.seed = int(seed)
        self.streams = [self._stream(s) for s in model.inputs]

    def _stream(self, source: InputSource) -> _Stream:
        stream = _Stream(source)
        schema = _load_schema(source) if source.avro_schema is not None else None
        if source.kind == "replay":
            stream.sample, stream.schema = _load_sample(source, schema)
            if source.event_time_field is not None:
                own = _time_format(stream.sample[0].get(source.event_time_field))
                stream.time_format = own if stream.schema is None else (
                    # an Avro string keeps the sample's own ISO form (with Z or an offset)
                    own if (avro := _avro_time_format(source, stream.schema)) == "iso-z"
                    and own in ("iso", "iso-z") else avro)
            pool = stream.sample
            if stream.schema is not None:
                stream.check([self._stamped(stream, r, 0) for r in pool],
                             f"--replay {source.name}={source.source}")
        else:
            stream.schema = schema
            stream.make = _load_make(source)
            pool = [self._made(stream, i, 0) for i in range(SKEW_POOL if self.model.skew
                                                             else 1)]
            stream.check(pool, f"--input {source.name}={source.source}")
        for field_name, _ in self.model.skew:
            seen: dict[str, Any] = {}
            counts: Counter[str] = Counter()
            for r in pool:
                if field_name in r:
                    key = _value_key(r[field_name])
                    seen.setdefault(key, r[field_name])
                    counts[key] += 1
            stream.skew_values[field_name] = [seen[k] for k, _ in counts.most_common()]
        return stream

    @staticmethod
    def _stamped(stream: _Stream, record: Mapping[str, Any], event_ms: int
                 ) -> dict[str, Any]:
        """A sample's record with its event time re-stamped to ``event_ms``."""
        out = dict(record)
        if stream.time_format is not None:
            out[str(stream.source.event_time_field)] = format_time(event_ms,
                                                                  stream.time_format)
        return out

    def _made(self, stream: _Stream, i: int, event_ms: int) -> dict[str, Any]:
        assert stream.make is not None
        where = f"--input {stream.source.name}={stream.source.source}"
        try:
            record = stream.make(i, random.Random(self.seed * 1_000_003 + i), int(event_ms))
        except Exception as exc:  # the user's function failed: say which record
            raise InputModelError(f"{where}: make({i}, …) failed: {type(exc).__name__}: "
                                  f"{exc}") from None
        if not isinstance(record, dict):
            raise InputModelError(f"{where}: make({i}, …) returned "
                                  f"{type(record).__name__}, not a dict")
        return record if stream.schema is None else _avro_values(record, stream.schema)

    def event_times(self, ids: np.ndarray, event_ts: int | np.ndarray) -> np.ndarray:
        """The event time each record carries: the intended one, less the disorder and
        lateness the model asks for."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.broadcast_to(np.asarray(event_ts, dtype=np.int64), ids.shape).copy()
        if self.model.disorder:
            share, max_ms = self.model.disorder
            hit = uniforms(self.seed, 1, ids) < share
            # 1 to MAX_MS back: every record of the share is out of order.
            out[hit] -= np.minimum(1 + (uniforms(self.seed, 2, ids[hit]) * max_ms
                                        ).astype(np.int64), max_ms)
        if self.model.late:
            share, ms = self.model.late
            out[uniforms(self.seed, 3, ids) < share] -= ms
        return out

    def records(self, ids: np.ndarray, event_ts: int | np.ndarray
                ) -> tuple[np.ndarray, list[bytes | None], list[bytes]]:
        """(input slot, Kafka key, value in the input's format) of records ``ids``: record
        ``i`` goes to input ``i mod n`` and is that input's ``i div n``-th."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(self.streams)
        slots = ids % n
        times = self.event_times(ids, event_ts).tolist()
        ranks = self._skew_ranks(ids, slots)
        keys: list[bytes | None] = []
        values: list[bytes] = []
        for row, (i, slot) in enumerate(zip(ids.tolist(), slots.tolist(), strict=True)):
            record, key = self._record(self.streams[slot], i // n, times[row],
                                       {f: r[row] for f, r in ranks.items()})
            keys.append(key)
            values.append(self.streams[slot].encode(record, i // n))
        return slots, keys, values

    def _skew_ranks(self, ids: np.ndarray, slots: np.ndarray) -> dict[str, list[int]]:
        """Per skewed field, each record's rank among its input's values of the field."""
        out = {}
        for k, (field_name, exponent) in enumerate(self.model.skew):
            draws = uniforms(self.seed, 10 + k, ids)
            ranks = np.zeros(len(ids), dtype=np.int64)
            for slot, stream in enumerate(self.streams):
                mine = slots == slot
                ranks[mine] = zipf_ranks(draws[mine], len(stream.skew_values[field_name]),
                                         exponent)
            out[field_name] = ranks.tolist()
        return out

    def _record(self, stream: _Stream, i: int, event_ms: int, ranks: Mapping[str, int]
                ) -> tuple[dict[str, Any], bytes | None]:
        if stream.make is not None:
            record = self._made(stream, i, event_ms)
        else:
            record = self._stamped(stream, stream.sample[i % len(stream.sample)], event_ms)
        key = None
        for k, (field_name, _) in enumerate(self.model.skew):
            value = stream.skew_values[field_name][ranks[field_name]]
            record[field_name] = value
            if k == 0:
                key = json.dumps(value, default=str).encode()
        return record, key

    def own_records(self, slot: int, count: int, event_ms: int) -> list[bytes]:
        """``count`` records of input ``slot`` for pgval's own events (negative record
        numbers: a ``make`` function sees them as such), at ``event_ms`` exactly."""
        stream = self.streams[slot]
        out = []
        for k in range(count):
            record, _ = self._record(stream, -1 - k, event_ms,
                                     {f: 0 for f, _ in self.model.skew})
            out.append(stream.encode(record, -1 - k))
        return out


def shares(values: Sequence[Any]) -> dict[Any, float]:
    """Each value's share of ``values`` (for tests and reports of a model's skew)."""
    counts = Counter(values)
    return {v: c / len(values) for v, c in counts.items()}
