"""Input models whose records are Avro: a ``.avro`` sample, a JSON-lines sample or a
``make`` function with the user's schema file; checked against the schema when loaded,
and read back by Spark's own ``from_avro`` exactly as pgval wrote them."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from pgval.config import input_model, resolve
from pgval.core.record_ids import record_ids
from pgval.datasets.models import (
    InputModel,
    InputModelError,
    PreparedModel,
    model_from_options,
    model_from_toml,
)

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "examples" / "inputs"
SCHEMA = INPUTS / "orders.avsc"
AVRO = INPUTS / "orders.avro"
JSONL = INPUTS / "orders.jsonl"
MAKE = f"{INPUTS / 'orders_make.py'}:make"
JOB = f"{ROOT / 'examples' / 'jobs' / 'orders_avro.py'}:build"
NOW = 1_800_000_000_000


def parsed() -> dict:
    return fastavro.parse_schema(json.loads(SCHEMA.read_text()))


def decode(values: list[bytes]) -> list[dict]:
    schema = parsed()
    return [fastavro.schemaless_reader(io.BytesIO(v), schema) for v in values]


def model(replay: dict[str, str] | None = None, make: dict[str, str] | None = None,
          schema: dict[str, str] | None = None, **shape: str) -> InputModel:
    built = model_from_options(replay or {}, make or {}, "ts" if replay else None,
                               {}, shape.get("disorder"), None, None, schema)
    assert built is not None
    return built


@pytest.mark.parametrize("how", ["avro sample", "json sample with a schema",
                                 "make with a schema", "spec file"])
def test_every_way_to_avro_writes_the_schemas_records(how: str) -> None:
    """Each way gives Avro values the shop's schema reads: the sample's fields, the event
    time re-stamped to the time pgval intends (an Avro timestamp), decimals as decimals."""
    the_model = {
        "avro sample": lambda: model({"orders": str(AVRO)}),
        "json sample with a schema": lambda: model({"orders": str(JSONL)},
                                                   schema={"orders": str(SCHEMA)}),
        "make with a schema": lambda: model(make={"orders": MAKE},
                                            schema={"orders": str(SCHEMA)}),
        "spec file": lambda: model_from_toml(INPUTS / "orders_avro.toml"),
    }[how]()
    assert the_model.inputs[0].avro
    prepared = PreparedModel(the_model, seed=3)
    ids = np.arange(400)
    _, _, values = prepared.records(ids, NOW)
    orders = decode(values)
    times = prepared.event_times(ids, NOW)
    assert [o["ts"] for o in orders] == [datetime.fromtimestamp(t / 1000, timezone.utc)
                                         for t in times.tolist()]
    assert all(isinstance(o["amount"], Decimal) and o["amount"] > 0 for o in orders)
    if how != "make with a schema":  # the sample's orders, in a loop
        sample = [json.loads(line) for line in JSONL.read_text().splitlines()]
        assert [o["order_id"] for o in orders[:200]] == [s["order_id"] for s in sample]
        assert [o["amount"] for o in orders[:200]] == [Decimal(str(s["amount"]))
                                                      for s in sample]
    if how in ("avro sample", "spec file"):  # the file's coupons (a union with null)
        assert sum(o["coupon"] is not None for o in orders[:200]) == 40
    own = decode(prepared.own_records(0, 2, NOW))
    assert [o["ts"] for o in own] == [datetime.fromtimestamp(NOW / 1000, timezone.utc)] * 2


def test_a_skewed_avro_input_keys_records_by_the_skewed_value() -> None:
    spec = model_from_toml(INPUTS / "orders_avro.toml")
    prepared = PreparedModel(spec, seed=5)
    _, keys, values = prepared.records(np.arange(5_000), NOW)
    customers = [o["customer"] for o in decode(values)]
    assert keys == [json.dumps(c).encode() for c in customers]
    top = max(set(customers), key=customers.count)
    assert customers.count(top) / len(customers) > 0.15  # Zipf 1.2 over 40 customers
    times = prepared.event_times(np.arange(5_000), NOW)
    assert 0.15 < float(np.mean(times < NOW)) < 0.25  # disorder 0.2


@pytest.mark.parametrize(("given", "said"), [
    ({"schema": {"other": str(SCHEMA)}}, "--avro-schema other: no input of that name"),
    ({"schema": {"orders": str(INPUTS / "orders.toml")}}, "not an Avro schema"),
    ({"schema": {"orders": str(INPUTS / "nowhere.avsc")}}, "cannot read it"),
    ({"replay": {"orders": str(INPUTS / "orders.toml")}, "suffix": ".avro"},
     "not an Avro object container file"),
    ({"bad_record": True}, "record 3 does not match the Avro schema"),
    ({"time_field": "amount"}, "pgval re-stamps a timestamp-millis"),
    ({"time_field": "missing"}, "has no field 'missing'"),
])
def test_avro_that_cannot_be_sent_is_one_sentence_before_a_run(given: dict, said: str,
                                                               tmp_path: Path) -> None:
    replay = given.get("replay", {"orders": str(JSONL)})
    if "suffix" in given:  # a file named .avro that is not one
        fake = tmp_path / "orders.avro"
        fake.write_bytes(Path(replay["orders"]).read_bytes())
        replay = {"orders": str(fake)}
    if given.get("bad_record"):  # a currency the schema's enum does not have
        lines = JSONL.read_text().splitlines()
        lines[2] = lines[2].replace('"EUR"', '"JPY"').replace('"GBP"', '"JPY"').replace(
            '"USD"', '"JPY"')
        (tmp_path / "orders.jsonl").write_text("\n".join(lines))
        replay = {"orders": str(tmp_path / "orders.jsonl")}
    with pytest.raises(InputModelError) as caught:
        model_from_options(replay, {}, given.get("time_field", "ts"), {}, None, None, None,
                           given.get("schema", {"orders": str(SCHEMA)}))
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_avro_schema_is_an_option_of_the_run_and_a_path_made_absolute(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(INPUTS)
    cfg = resolve({"job": JOB, "topology": "job", "replay": {"orders": "orders.jsonl"},
                   "event_time_field": "ts", "avro_schema": {"orders": "orders.avsc"}})
    assert cfg.avro_schema == {"orders": str(SCHEMA)}
    built = input_model(cfg)
    assert built is not None and built.inputs[0].avro_schema == str(SCHEMA)
    assert InputModel.from_record(json.loads(json.dumps(built.to_record()))) == built
    with pytest.raises(InputModelError, match="give it alone"):
        model_from_options({}, {}, None, {}, None, None, str(INPUTS / "orders_avro.toml"),
                           {"orders": str(SCHEMA)})


@pytest.fixture(scope="module")
def spark() -> object:
    from tests.spark_local import local_session

    yield from local_session("pgval-input-avro")


def test_spark_from_avro_reads_what_pgval_wrote(spark: object, tmp_path: Path) -> None:
    """The example job, run as a batch over records the Avro model made (Spark's own
    ``from_avro``, the job's schema file), sums each customer's orders per window as
    decoding the same bytes in Python does, and its ids are the records' coordinates."""
    import pyarrow.parquet as pq

    from pgval.job import KafkaInputs
    from pgval.topologies.batch import KAFKA_SOURCE_DDL
    from pgval.topologies.job_query import load_job_for_spark

    prepared = PreparedModel(model_from_toml(INPUTS / "orders_avro.toml"), seed=11)
    ids = np.arange(3_000)
    event_ts = NOW + ids * 20  # one a 20 ms: 60 s of orders, six 10 s windows
    _, keys, values = prepared.records(ids, event_ts)
    partitions = (ids % 3).astype(np.int32)
    offsets = ids // 3
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                      "topic": pa.array(["t-orders"] * len(ids)),
                      "partition": pa.array(partitions), "offset": pa.array(offsets),
                      "timestamp": pa.array(event_ts).cast(pa.timestamp("ms", tz="UTC")),
                      "timestampType": pa.array(np.ones(len(ids), dtype=np.int32))})
    pq.write_table(table, tmp_path / "orders.parquet")
    frame = spark.read.schema(KAFKA_SOURCE_DDL).parquet(str(tmp_path / "orders.parquet"))
    kafka = KafkaInputs(spark, {"orders": "t-orders"}, {}, recorded={"orders": frame})
    job = load_job_for_spark(JOB)
    got = {(r["window_start"].replace(tzinfo=timezone.utc), r["customer"]):
           (r["orders"], r["total"], r["with_coupon"], sorted(r["ids"]))
           for r in job.build(spark, kafka).collect()}

    want: dict = defaultdict(lambda: [0, Decimal(0), 0, []])
    rids = record_ids(0, partitions, offsets).tolist()
    for order, rid in zip(decode(values), rids, strict=True):
        start = order["ts"].replace(microsecond=0, second=order["ts"].second // 10 * 10)
        cell = want[(start, order["customer"])]
        cell[0] += 1
        cell[1] += order["amount"]
        cell[2] += order["coupon"] is not None
        cell[3].append(rid)
    assert got == {k: (n, total, c, sorted(r)) for k, (n, total, c, r) in want.items()}
    assert sum(v[0] for v in got.values()) == len(ids)


def _sample(tmp_path: Path, change: dict) -> Path:
    """The orders sample with its third record changed."""
    lines = [json.loads(line) for line in JSONL.read_text().splitlines()]
    lines[2].update(change)
    path = tmp_path / "orders.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


@pytest.mark.parametrize(("change", "said"), [
    ({"amount": 12.345}, "record 3 does not match the Avro schema"),          # its scale
    ({"amount": 123456789.5}, "more than the 10 digits of decimal(10,2)"),    # its precision
])
def test_a_decimal_the_schema_cannot_hold_is_one_sentence(tmp_path: Path, change: dict,
                                                          said: str) -> None:
    with pytest.raises(InputModelError, match=r"record 3 .*") as caught:
        model_from_options({"orders": str(_sample(tmp_path, change))}, {}, "ts", {}, None,
                           None, None, {"orders": str(SCHEMA)})
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_time_without_an_offset_is_utc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """As JSON means it, whatever the host's zone (fastavro writes a naive time in it)."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        schema = json.loads(SCHEMA.read_text())
        schema["fields"].append({"name": "paid", "type": {"type": "long",
                                                          "logicalType": "timestamp-millis"}})
        (tmp_path / "o.avsc").write_text(json.dumps(schema))
        sample = _sample(tmp_path, {"paid": "2026-11-02T09:00:00"})
        lines = [json.loads(line) for line in sample.read_text().splitlines()]
        for line in lines:
            line.setdefault("paid", "2026-11-02T09:00:00")
        sample.write_text("".join(json.dumps(r) + "\n" for r in lines))
        model = model_from_options({"orders": str(sample)}, {}, "ts", {}, None, None, None,
                                   {"orders": str(tmp_path / "o.avsc")})
        _, _, values = PreparedModel(model, 1).records(np.arange(3), NOW)
        parsed = fastavro.parse_schema(schema)
        paid = [fastavro.schemaless_reader(io.BytesIO(v), parsed)["paid"] for v in values]
        assert paid == [datetime(2026, 11, 2, 9, tzinfo=timezone.utc)] * 3
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_later_make_record_the_schema_cannot_write_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "def make(i, rng, event_ms):\n"
        "    return {'order_id': f'M-{i}', 'customer': 'c', 'amount': 1,\n"
        "            'currency': 'EUR' if i < 5 else 'JPY', 'ts': event_ms}\n")
    model = model_from_options({}, {"orders": f"{tmp_path / 'm.py'}:make"}, None, {}, None,
                               None, None, {"orders": str(SCHEMA)})
    prepared = PreparedModel(model, 1)
    prepared.records(np.arange(5), NOW)
    with pytest.raises(InputModelError, match="input .orders.: record 5 does not match"):
        prepared.records(np.arange(10), NOW)
