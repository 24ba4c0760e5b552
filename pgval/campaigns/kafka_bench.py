"""Rates on a real broker: the generator into Kafka, and read-back + validation of a run.

``pgval bench generator`` and ``pgval bench readback`` start one KRaft broker of their own
(small heap), owned like a run: ``state.json`` and a reaper first, so even a SIGKILL of
pgval leaves nothing behind, and the broker is stopped (teardown shielded from a second
Ctrl-C) however the bench ends. Broker data is deleted afterwards (a broker that did not
start keeps its log).

Every rate counts acknowledged or read events over wall-clock seconds of the stage alone;
the setup (broker start, topic creation, writing the outputs) is not timed.
"""

from __future__ import annotations

import contextlib
import resource
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, Producer

from pgval.checker.evaluate import evaluate
from pgval.cluster.guard import start_reaper, stop_reaper
from pgval.core.clock import now_ms
from pgval.core.errors import EnvironmentFailure
from pgval.core.files import write_private_json
from pgval.core.redact import private_dir
from pgval.core.schema import Topics, resource_name
from pgval.datasets import GeneratorConfig, KafkaSink, ProducerProgress, generate_range
from pgval.evidence.bundle import streams_from_records
from pgval.host import signals
from pgval.host.identity import Owner
from pgval.host.memory import bulk_arrays
from pgval.kafka.admin import create_topics
from pgval.kafka.broker import KafkaCluster
from pgval.kafka.reader import end_snapshot, read_topics, reader_conf
from pgval.kafka.topic_records import TopicRecords
from pgval.oracle import expected_outputs
from pgval.records.own_inputs import decode_chunk
from pgval.records.parse import InputEvents, ResourceTable

#: Progress lines go here (the CLI prints them); None: silent.
Say = Callable[[str], None]


@contextlib.contextmanager
def bench_broker(run_dir: Path, partitions: int = 3, heap: str = "256m",
                 sasl: bool = True) -> Iterator[KafkaCluster]:
    """One broker owned by this process, stopped always; its data is deleted at the end.
    ``sasl``: closed like a run's cluster (False only to measure what SASL costs)."""
    run_dir = private_dir(Path(run_dir).resolve())
    owner = Owner.me()
    state = run_dir / "state.json"
    # First, before any process exists: whoever finds this directory knows whose it is.
    write_private_json(state, {"owner": owner.as_dict(), "held": False, "stage": "bench",
                               "complete": False})
    reaper = start_reaper(run_dir, owner)
    cluster = KafkaCluster(run_dir, brokers=1, partitions=partitions, heap=heap, sasl=sasl)
    started = False
    try:
        cluster.start()
        started = True
        yield cluster
    finally:
        with signals.shielded():
            try:
                cluster.stop()
            finally:
                if not cluster.procs:
                    state.unlink(missing_ok=True)
                    stop_reaper(reaper)
                    if started:  # a broker that never started keeps its log for the error
                        shutil.rmtree(run_dir / "kafka", ignore_errors=True)



def _end_offsets(bootstrap: str, topics: Sequence[str],
                 config: dict[str, Any] | None = None) -> int:
    """Sum of the topics' end offsets, as a read-back sees them: records Kafka holds (no
    transactions here)."""
    consumer = Consumer(reader_conf(bootstrap, "read_committed", config))
    try:
        return sum(sum(end_snapshot(consumer, bootstrap, topic, 30.0)[0].values())
                   for topic in topics)
    finally:
        consumer.close()


# --------------------------------------------------------------------------- generator


@dataclass
class GeneratorRate:
    """One generator run into the bench broker."""

    events: int
    producers: int
    sent: int
    delivered: int
    failed: int
    undelivered: int
    #: Records the broker holds afterwards (sum of end offsets); must equal ``delivered``.
    in_kafka: int
    #: From the producers' common start to the last hand-over to the client.
    handover_s: float
    #: From the common start until every producer had flushed (all acknowledged).
    acked_s: float
    sink: dict[str, Any] = field(default_factory=dict)

    @property
    def acked_per_s(self) -> float:
        return self.delivered / self.acked_s if self.acked_s > 0 else 0.0

    @property
    def handover_per_s(self) -> float:
        return self.sent / self.handover_s if self.handover_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return (self.failed == 0 and self.undelivered == 0 and self.sent == self.events
                and self.in_kafka == self.delivered)


def run_generator(bootstrap: str, topics: Topics, cfg: GeneratorConfig, sink: KafkaSink,
                  say: Say | None = None) -> GeneratorRate:
    """Run the generator's producer processes into ``topics`` and time until all acked."""
    from pgval.datasets import run_producers

    started: list[int] = []
    last = [0.0]

    def progress(counters: Sequence[ProducerProgress]) -> None:
        if say is None or time.monotonic() - last[0] < 2.0:
            return
        last[0] = time.monotonic()
        sent = sum(c.sent for c in counters)
        delivered = sum(c.delivered for c in counters)
        say(f"  generator: {sent:,} of {cfg.total_events():,} sent, "
            f"at least {delivered:,} acknowledged")

    report = run_producers(cfg, sink, on_progress=progress, progress_interval_s=0.5,
                           on_start=lambda g: started.append(g.started_ms or now_ms()))
    acked_s = (now_ms() - started[0]) / 1000.0 if started else 0.0
    if report.errors:
        raise EnvironmentFailure("the generator failed: " + "; ".join(report.errors))
    return GeneratorRate(
        events=cfg.total_events() or 0, producers=cfg.producers, sent=report.sent,
        delivered=report.delivered, failed=report.failed, undelivered=report.undelivered,
        in_kafka=_end_offsets(bootstrap, topics.inputs, {
            k: v for k, v in sink.config.items() if k.startswith(("security.", "sasl."))}),
        handover_s=report.elapsed_s,
        acked_s=acked_s,
        sink={"linger_ms": sink.linger_ms, "compression": sink.compression,
              "batch_bytes": sink.batch_bytes,
              **{k: v for k, v in sink.config.items() if k != "sasl.password"}})


def bench_generator(run_dir: Path, events: int, producers: int = 1, partitions: int = 3,
                    sink_options: dict[str, Any] | None = None, repeat: int = 1,
                    say: Say | None = None, sasl: bool = True) -> list[GeneratorRate]:
    """Generator → one local broker at unlimited rate, ``repeat`` times (fresh topics each)."""
    results = []
    with bench_broker(run_dir, partitions, sasl=sasl) as cluster:
        for k in range(repeat):
            topics = Topics.with_prefix(f"bench{k}-")
            create_topics(cluster.client_config, topics.inputs, partitions)
            cfg = GeneratorConfig(rate=None, events=events, producers=producers)
            sink = KafkaSink(cluster.bootstrap, topics=topics,
                             config={"log_level": 3, **cluster.auth_config},
                             **(sink_options or {}))
            if say:
                say(f"run {k + 1} of {repeat}: {events:,} events, {producers} producer(s)")
            results.append(run_generator(cluster.bootstrap, topics, cfg, sink, say))
    return results


# --------------------------------------------------------------------------- read-back


@dataclass
class ReadbackRate:
    """Read-back and validation of one synthetic run, stage by stage."""

    events: int
    outputs: int
    generator: GeneratorRate
    stages_s: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: What validation found (a sanity check: the planted anomalies must show).
    verdict: dict[str, Any] = field(default_factory=dict)
    #: The reader asked for → what read (``TopicRecords.reader``).
    readers: dict[str, str] = field(default_factory=dict)
    #: Seconds of the same read by each further reader asked for.
    other_reads_s: dict[str, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return sum(self.stages_s.values())

    def per_s(self, stage: str | None = None) -> float:
        secs = self.total_s if stage is None else self.stages_s[stage]
        return self.events / secs if secs > 0 else 0.0


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the Java reader)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


#: Events whose expected outputs are computed at once (bounds this process's memory).
EXPECTED_CHUNK = 5_000_000


def _expected_rows(cfg: GeneratorConfig, window_ms: int) -> list[bytes]:
    """The SST outputs of the generated events (oracle), as the topology's JSON values,
    with planted anomalies: every 997th output lost, every 991st written twice. Computed a
    chunk of events at a time (synthetic event time only grows, so a window left open at a
    chunk's end is finished with the next chunk's events)."""
    n = cfg.total_events() or 0
    table = ResourceTable(resource_name(r) for r in range(cfg.resources))
    values: list[bytes] = []
    k = 0  # the row's number over all chunks: the planted anomalies do not move
    held: InputEvents | None = None
    for lo in range(0, n, EXPECTED_CHUNK):
        batch = generate_range(cfg, 0, lo, min(EXPECTED_CHUNK, n - lo))
        assert batch.event_ts is not None
        events = InputEvents(batch.ids, ~batch.is_post, batch.resource.astype(np.int32),
                             batch.event_ts, batch.event_ts, table)
        if held is not None:
            events = InputEvents.concat([held, events], table)
        last = lo + EXPECTED_CHUNK >= n
        open_window = np.floor_divide(events.event_ts, window_ms) >= (
            events.event_ts[-1] // window_ms)
        done = np.ones(len(events), bool) if last else ~open_window
        for row in expected_outputs(events.take(np.flatnonzero(done)), "sst",
                                    window_ms).to_records():
            if k % 997 != 5:
                value = orjson.dumps(row)
                values.append(value)
                if k % 991 == 3:
                    values.append(value)
            k += 1
        held = None if last else events.take(np.flatnonzero(~done))
    return values


def _write_outputs(bootstrap: str, topic: str, values: Iterable[bytes],
                   config: dict[str, Any] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "compression.type": "lz4",
                         "message.max.bytes": 16 << 20, "log_level": 3, **(config or {})})
    for value in values:
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise EnvironmentFailure(f"could not write the bench outputs to {topic}")


def _fill_bench_topics(cluster: KafkaCluster, topics: Topics, cfg: GeneratorConfig,
                       window_ms: int, say: Say | None) -> tuple[GeneratorRate, list[bytes]]:
    """Write the inputs (generator) and their outputs (oracle, planted anomalies): what a
    drained run leaves for ``pgval validate``. Returns the generator's rate and the outputs."""
    if say:
        say(f"writing {cfg.events or 0:,} events with the generator…")
    sink = KafkaSink(cluster.bootstrap, topics=topics,
                     config={"log_level": 3, **cluster.auth_config})
    gen = run_generator(cluster.bootstrap, topics, cfg, sink, say)
    if not gen.ok:
        raise EnvironmentFailure(f"the generator did not deliver every event: {gen}")
    values = _expected_rows(cfg, window_ms)
    if say:
        say(f"writing {len(values):,} outputs…")
    _write_outputs(cluster.bootstrap, topics.output, values, cluster.auth_config)
    return gen, values


def _timed(result: ReadbackRate, stage: str, fn: Callable[[], Any], say: Say | None) -> Any:
    """``fn()``, its wall and CPU seconds kept in ``result`` under ``stage``."""
    if say:
        say(f"{stage}…")
    t, c = time.perf_counter(), _cpu_s()
    out = fn()
    result.stages_s[stage] = time.perf_counter() - t
    result.cpu_s[stage] = _cpu_s() - c
    return out


def _read_back(cluster: KafkaCluster, topics: Topics, events: int, workers: int | None,
               reader: str, result: ReadbackRate, say: Say | None) -> dict[str, TopicRecords]:
    """The three topics read as ``pgval validate`` reads them, with ``reader``; notes in
    ``result`` which reader it became."""
    last = [time.monotonic()]

    def progress(n: int) -> None:
        if say is not None and time.monotonic() - last[0] >= 2.0:
            last[0] = time.monotonic()
            say(f"  {n:,} records read")

    got = read_topics(cluster.bootstrap, (topics.get, topics.post, topics.output),
                      timeout_s=max(120.0, events / 50_000), workers=workers,
                      on_progress=progress, config=cluster.auth_config, reader=reader,
                      on_chunk=decode_chunk)
    result.readers[reader] = got[topics.get].reader
    return got


def _check_planted(result: ReadbackRate, evaluation: Any, streams: Any) -> None:
    """Keep the verdict in ``result``; a bench whose planted duplicates and losses were not
    found (or that saw malformed records) measured something else: an error."""
    v = evaluation.validation
    result.verdict = {"expected": int(v.expected), "processed": int(v.processed),
                      "duplicate": int(v.duplicate), "unprocessed": int(v.unprocessed),
                      "malformed": int(streams.events.malformed + streams.outputs.malformed)}
    if not (v.duplicate and v.unprocessed) or result.verdict["malformed"]:
        raise EnvironmentFailure(f"the bench's planted anomalies were not found exactly: "
                                f"{result.verdict}")


def bench_readback(run_dir: Path, events: int, window_ms: int = 1000,
                   synthetic_rate: float = 100_000.0, partitions: int = 3,
                   workers: int | None = None,
                   say: Say | None = None, sasl: bool = True,
                   readers: Sequence[str] = ("auto",)) -> ReadbackRate:
    """Write ``events`` inputs (generator, one producer) and their SST outputs (oracle, a few
    planted anomalies) into a local broker, then time what ``pgval validate`` does after the
    drain: read every topic back (read_committed, to the end offsets, ``workers`` reader
    processes, default as ``read_topics``), turn the records into columns
    (``streams_from_records``) and evaluate (oracle, validator, metrics)."""
    cfg = GeneratorConfig(rate=None, events=events, producers=1, event_time="synthetic",
                          synthetic_rate=synthetic_rate, start_ts_ms=now_ms() - 3_600_000)
    topics = Topics.with_prefix("bench-")
    with bench_broker(run_dir, partitions, sasl=sasl) as cluster:
        create_topics(cluster.client_config, [*topics.inputs, topics.output], partitions)
        gen, values = _fill_bench_topics(cluster, topics, cfg, window_ms, say)
        result = ReadbackRate(events=events, outputs=len(values), generator=gen)
        with bulk_arrays():  # as pgval validate reads and judges
            evaluation, streams = _read_and_judge(cluster, topics, cfg, events, window_ms,
                                                  workers, readers, result, say)
    _check_planted(result, evaluation, streams)
    return result


def _read_and_judge(cluster: KafkaCluster, topics: Topics, cfg: GeneratorConfig, events: int,
                    window_ms: int, workers: int | None, readers: Sequence[str],
                    result: ReadbackRate, say: Say | None) -> tuple[Any, Any]:
    """The timed stages of :func:`bench_readback`: (evaluation, streams)."""
    records: dict[str, TopicRecords] = _timed(result, "read back", lambda: _read_back(
        cluster, topics, events, workers, readers[0], result, say), say)
    for other in readers[1:]:
        t = time.perf_counter()
        again = _read_back(cluster, topics, events, workers, other, result, say)
        result.other_reads_s[other] = time.perf_counter() - t
        if any(len(again[k]) != len(records[k]) or not again[k].complete
               for k in records):
            raise EnvironmentFailure(f"the {other} reader read other records than the "
                                    f"{readers[0]} reader")
        del again
    read, delivered = (len(records[topics.get]) + len(records[topics.post]),
                       result.generator.delivered)
    if read != delivered:
        raise EnvironmentFailure(f"read {read:,} inputs back, but {delivered:,} were delivered")
    inputs = {"get": records[topics.get], "post": records[topics.post]}
    streams = _timed(result, "records to columns", partial(
        streams_from_records, inputs, records[topics.output], cfg.resources, None), say)
    del records, inputs  # as pgval validate lets go of them (evidence on disk by then)
    evaluation = _timed(result, "validation", lambda: evaluate(
        streams.events, streams.outputs, "sst", window_ms), say)
    return evaluation, streams


@dataclass
class SparkReadbackRate:
    """``pgval bench spark-readback``: the Spark read-back, oracle and checker of a drained
    run, and (``compared``) the numpy path on the same topics with every difference named."""

    events: int
    outputs: int
    master: str
    generator: GeneratorRate
    stages_s: dict[str, float] = field(default_factory=dict)
    #: Peak resident memory (MiB) of this process and of the local Spark JVM.
    peak_mb: dict[str, float | None] = field(default_factory=dict)
    judgement: dict[str, Any] = field(default_factory=dict)
    #: Why the Spark read-back could not judge (None: it did).
    unknown: str | None = None
    compared: bool = False
    differences: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return not self.differences


def _numpy_judgement(cluster: KafkaCluster, topics: Topics, events: int, window_ms: int,
                     resources: int, result: SparkReadbackRate, say: Say | None) -> Any:
    """The numpy path, as ``pgval validate`` takes it: read-back, columns, evaluation."""
    rate = ReadbackRate(events=events, outputs=result.outputs, generator=result.generator)
    records = _timed(rate, "read back", lambda: _read_back(
        cluster, topics, events, None, "auto", rate, say), say)
    inputs = {"get": records[topics.get], "post": records[topics.post]}
    streams = _timed(rate, "records to columns", partial(
        streams_from_records, inputs, records[topics.output], resources, None), say)
    del records, inputs  # the columns hold what the evaluation needs
    evaluation = _timed(rate, "validation", lambda: evaluate(
        streams.events, streams.outputs, "sst", window_ms), say)
    result.stages_s.update({f"numpy {k}": v for k, v in rate.stages_s.items()})
    return evaluation


def bench_spark_readback(run_dir: Path, events: int, window_ms: int = 1000,
                         partitions: int = 3, master: str = "local[2]", heap_mb: int = 1024,
                         compare: bool = True, say: Say | None = None) -> SparkReadbackRate:
    """Write ``events`` inputs and their SST outputs (planted anomalies) into a broker of the
    bench's own, then judge them on Spark (:func:`pgval.scale.judge.judge_on_spark`:
    read-back to the end offsets, oracle, checker); with ``compare`` also the numpy path
    on the same topics, and name every difference."""
    from pgval.scale.agreement import checker_session, differences, spark_call
    from pgval.scale.bench import peak_mb
    from pgval.scale.judge import judge_on_spark

    cfg = GeneratorConfig(rate=None, events=events, producers=1, event_time="synthetic",
                          synthetic_rate=100_000.0, start_ts_ms=now_ms() - 3_600_000)
    topics = Topics.with_prefix("bench-")
    tables = Path(run_dir).resolve() / "spark-tables"
    with bench_broker(run_dir, partitions) as cluster:
        create_topics(cluster.client_config, [*topics.inputs, topics.output], partitions)
        gen, values = _fill_bench_topics(cluster, topics, cfg, window_ms, say)
        result = SparkReadbackRate(events, len(values), master, gen)
        del values
        t = time.perf_counter()
        spark = checker_session(master, heap_mb, kafka=True)
        result.stages_s["Spark session"] = time.perf_counter() - t
        try:
            if say:
                say("judging on Spark: read-back, oracle, checker…")
            judged = spark_call(master, lambda: judge_on_spark(
                spark, cluster.bootstrap, {"get": topics.get, "post": topics.post},
                topics.output, "sst", window_ms, tables, resources=cfg.resources,
                config=cluster.auth_config))
            result.stages_s.update({f"Spark {k}": v for k, v in judged.stages_s.items()})
            result.judgement = judged.as_dict()
            result.unknown = judged.reason if judged.validation is None else None
            proc = getattr(spark.sparkContext._gateway, "proc", None)  # the local JVM
            result.peak_mb["Spark JVM"] = peak_mb(proc.pid) if proc is not None else None
            if compare and judged.validation is not None:
                evaluation = _numpy_judgement(cluster, topics, events, window_ms,
                                              cfg.resources, result, say)
                result.compared = True
                result.differences = differences(
                    evaluation.validation, judged.validation,
                    duplicate_inputs=evaluation.expected.duplicate_inputs)
        finally:
            spark.stop()
            shutil.rmtree(tables, ignore_errors=True)
    result.peak_mb["python"] = peak_mb()
    return result



def _write_job_outputs(bootstrap: str, topic: str, rows: Path,
                       config: dict[str, Any] | None) -> int:
    """A job's batch rows (Parquet: ``key``, ``ids``, ``value``) written as its streaming
    query writes them (``_pgval_key``, ``_pgval_value``, ``ids``), with the bench's planted
    anomalies: every 997th row lost, every 991st written twice. Returns the outputs written."""
    import pyarrow.dataset as ds

    written = 0

    def values() -> Iterator[bytes]:  # a batch of rows at a time: a job may have millions
        nonlocal written
        k = 0
        for batch in ds.dataset(str(rows), format="parquet").to_batches(batch_size=64):
            for key, ids, value in zip(*(batch.column(c).to_pylist()
                                         for c in ("key", "ids", "value")), strict=True):
                if k % 997 != 5:
                    out = orjson.dumps({"_pgval_key": key, "_pgval_value": value, "ids": ids})
                    written += 1 + (k % 991 == 3)
                    yield out
                    if k % 991 == 3:
                        yield out
                k += 1

    _write_outputs(bootstrap, topic, values(), config)
    return written


def bench_spark_job(run_dir: Path, events: int, job_ref: str, partitions: int = 3,
                    master: str = "local[2]", heap_mb: int = 1024, say: Say | None = None
                    ) -> SparkReadbackRate:
    """A user's job judged on Spark from Kafka: write ``events`` inputs with the generator,
    run ``job_ref`` as a batch over them on Spark and write its rows as the job's outputs
    (planted anomalies), then judge the topics as a run judged on Spark is judged
    (:func:`pgval.scale.judge.judge_job_on_spark`: read-back, the job's batch run again as
    the oracle, its tables, the checker)."""
    from pgval.oracle.values import DEFAULT_TOLERANCE
    from pgval.scale.agreement import checker_session, spark_call
    from pgval.scale.bench import peak_mb
    from pgval.scale.judge import judge_job_on_spark
    from pgval.scale.kafka_read import read_back_on_spark
    from pgval.topologies.batch import batch_meanings, batch_rows_on_spark
    from pgval.topologies.job_query import load_job_for_spark

    cfg = GeneratorConfig(rate=None, events=events, producers=1, event_time="synthetic",
                          synthetic_rate=100_000.0, start_ts_ms=now_ms() - 3_600_000)
    topics = Topics.with_prefix("bench-")
    names = {"get": topics.get, "post": topics.post}
    tables = Path(run_dir).resolve() / "spark-tables"
    with bench_broker(run_dir, partitions) as cluster:
        create_topics(cluster.client_config, [*topics.inputs, topics.output], partitions)
        if say:
            say(f"writing {events:,} events with the generator…")
        gen = run_generator(cluster.bootstrap, topics, cfg, KafkaSink(
            cluster.bootstrap, topics=topics, config={"log_level": 3, **cluster.auth_config}),
            say)
        if not gen.ok:
            raise EnvironmentFailure(f"the generator did not deliver every event: {gen}")
        t = time.perf_counter()
        spark = checker_session(master, heap_mb, kafka=True)
        session_s = time.perf_counter() - t
        try:
            batch_meanings(spark)
            job = load_job_for_spark(job_ref)

            def batch(staged: Path, folder: Path) -> Path:
                return batch_rows_on_spark(job, spark, staged, names, folder)

            if say:
                say("the job's outputs: its batch run over the inputs…")
            spark_call(master, lambda: read_back_on_spark(
                spark, cluster.bootstrap, names, topics.output, tables / "fill", 0,
                config=cluster.auth_config, job=True))
            rows = spark_call(master, lambda: batch(tables / "fill" / "staged_inputs",
                                                    tables / "fill-rows"))
            outputs = _write_job_outputs(cluster.bootstrap, topics.output, rows,
                                         cluster.auth_config)
            result = SparkReadbackRate(events, outputs, master, gen)
            result.stages_s["Spark session"] = session_s
            if say:
                say("judging on Spark: read-back, the job's batch run, its tables, checker…")
            judged = spark_call(master, lambda: judge_job_on_spark(
                spark, cluster.bootstrap, names, topics.output, tables / "judged", batch,
                DEFAULT_TOLERANCE, config=cluster.auth_config))
            result.stages_s.update({f"Spark {k}": v for k, v in judged.stages_s.items()})
            result.judgement = judged.as_dict()
            result.unknown = judged.reason if judged.validation is None else None
            proc = getattr(spark.sparkContext._gateway, "proc", None)  # the local JVM
            result.peak_mb["Spark JVM"] = peak_mb(proc.pid) if proc is not None else None
        finally:
            spark.stop()
            shutil.rmtree(tables, ignore_errors=True)
    result.peak_mb["python"] = peak_mb()
    return result
