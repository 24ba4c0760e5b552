"""How fast one producer process can generate events (``python -m pgval.datasets.bench_generator``).

The benchmark needs the input side to outrun the system under test, so this measures, for ONE
process at unlimited rate: generation alone, generation + JSON encoding, the JSON-lines file
sink in-process and as a spawned producer (what experiments run), and the per-record
formatting alternatives the vectorised encoder replaced. ``--kafka BOOTSTRAP`` adds the Kafka
sink against a running broker (topics ``get``/``post`` must exist).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from pgval.core.schema import GET, POST, resource_name

from .generator import (
    GeneratorConfig,
    generate_batch,
    produce,
    run_producers,
)
from .sinks import FileSink, KafkaSink, NullSink, encode_json_lines

TARGET_RATE = 250_000


def _timed(fn: Callable[[], int]) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = fn()
    return n, time.perf_counter() - t0


def _line(name: str, events: int, seconds: float) -> float:
    rate = events / seconds if seconds > 0 else float("inf")
    print(f"  {name:<44} {events:>10,} ev in {seconds:6.2f} s = {rate:>12,.0f} ev/s")
    return rate


def bench_generate(cfg: GeneratorConfig) -> float:
    def run() -> int:
        total = 0
        for b in range(10**9):
            batch = generate_batch(cfg, 0, b)
            if len(batch) == 0:
                return total
            total += len(batch)
        return total

    return _line("generate_batch only", *_timed(run))


def bench_encoders(cfg: GeneratorConfig, events: int) -> dict[str, float]:
    """Vectorised encoder vs per-record bytes formatting vs orjson, same batches."""
    batches = [generate_batch(cfg, 0, b) for b in range(max(1, events // cfg.batch_size))]
    ts, ingress = 1_763_000_000_123, 1_763_000_000_125
    names = [resource_name(i) for i in range(cfg.resources)]
    mids = [[f',"type":"{t}","resource":"{r}","event_ts":'.encode() for r in names]
            for t in (GET, POST)]
    n = sum(len(b) for b in batches)
    results = {}

    def vectorised() -> int:
        for b in batches:
            encode_json_lines(b, ts, ingress)
        return n

    def per_record() -> int:
        for b in batches:
            b"".join([
                b'{"id":%d%s%d,"ingress_ts":%d}\n' % (i, mids[p][r], ts, ingress)
                for i, p, r in zip(b.ids.tolist(), b.is_post.tolist(), b.resource.tolist(),
                                   strict=True)
            ])
        return n

    def with_orjson() -> int:
        types = (GET, POST)
        for b in batches:
            b"".join([
                orjson.dumps({"id": i, "type": types[p], "resource": names[r], "event_ts": ts,
                              "ingress_ts": ingress}) + b"\n"
                for i, p, r in zip(b.ids.tolist(), b.is_post.tolist(), b.resource.tolist(),
                                   strict=True)
            ])
        return n

    results["vectorised"] = _line("encode: numpy byte matrix (used)", *_timed(vectorised))
    results["per_record"] = _line("encode: per-record bytes % formatting", *_timed(per_record))
    results["orjson"] = _line("encode: orjson per record", *_timed(with_orjson))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--batch-size", type=int, default=GeneratorConfig.batch_size)
    parser.add_argument("--resources", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the files")
    parser.add_argument("--kafka", default=None, help="also bench the Kafka sink at BOOTSTRAP")
    parser.add_argument("--compression", default="lz4", help="Kafka compression.type")
    parser.add_argument("--linger-ms", type=int, default=10)
    args = parser.parse_args(argv)

    cfg = GeneratorConfig(rate=None, events=args.events, producers=1,
                          batch_size=args.batch_size, resources=args.resources)
    print(f"one producer, unlimited rate, {args.events:,} events, batch {args.batch_size:,}, "
          f"{args.resources} resources")
    bench_generate(cfg)
    bench_encoders(cfg, min(args.events, 500_000))

    null = produce(cfg, NullSink(encode=True))
    _line("NullSink (generate + encode, paced loop)", null.sent, null.elapsed_s)

    with tempfile.TemporaryDirectory(prefix="pgval-bench-", dir=args.dir) as tmp:
        path = Path(tmp) / "inputs.jsonl"
        rep = produce(cfg, FileSink(path))
        size = path.stat().st_size
        file_rate = _line("FileSink in-process", rep.sent, rep.elapsed_s)
        print(f"    file: {size / 1e6:,.1f} MB, {size / max(rep.sent, 1):.1f} bytes/event")
        synthetic = GeneratorConfig(rate=None, events=args.events, batch_size=args.batch_size,
                                    resources=args.resources, event_time="synthetic",
                                    synthetic_rate=100_000, start_ts_ms=1_763_000_000_000)
        srep = produce(synthetic, FileSink(path, ingress="event"))
        _line("FileSink in-process, synthetic event time", srep.sent, srep.elapsed_s)
        group = run_producers(cfg, FileSink(path))
        proc_rate = _line("FileSink, 1 spawned producer process", group.sent, group.elapsed_s)
        lines = path.read_bytes().count(b"\n")
        assert lines == args.events, f"{lines} lines, expected {args.events}"

    if args.kafka:
        sink = KafkaSink(args.kafka, compression=args.compression, linger_ms=args.linger_ms)
        krep = produce(cfg, sink)
        _line(f"KafkaSink ({args.compression}, linger {args.linger_ms} ms) sent",
              krep.sent, krep.elapsed_s)
        print(f"    delivered {krep.delivered:,}, failed {krep.failed:,}, "
              f"undelivered {krep.undelivered:,}")

    best = max(file_rate, proc_rate)
    verdict = "OK" if min(file_rate, proc_rate) >= TARGET_RATE else "BELOW TARGET"
    print(f"JSON-lines file sink: {best:,.0f} ev/s from one process "
          f"(target >= {TARGET_RATE:,}): {verdict}")
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    raise SystemExit(main())
