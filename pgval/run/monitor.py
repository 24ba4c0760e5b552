"""Watching the query: the output topic's size and, during the warm-up, its records; the
query's progress against the input topics' end offsets — when priming is done, and when the
drain is."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, TopicPartition

from pgval.checker.explain import watermark_ms
from pgval.checker.result import Reason
from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.core.schema import Topics
from pgval.deploy.driver_process import DriverProcess
from pgval.kafka.client import quiet_conf
from pgval.run.result import Status


class OutputMonitor:
    """Counts records in the output topic (sum of high watermarks), cheaply, once a second;
    during the warm-up it also reads the new outputs (:meth:`follow`, :meth:`new_outputs`)."""

    def __init__(self, client_config: dict[str, Any], topics: Topics) -> None:
        self.topics = topics
        # Watermarks only, never records: librdkafka's own logging kept quiet as for every
        # pgval client (a fault makes refused connections expected).
        self.consumer = Consumer(quiet_conf(str(client_config["bootstrap.servers"]), {
            **client_config, "group.id": "pgval-monitor", "enable.auto.commit": False}))
        self._partitions: list[int] | None = None

    def _output_partitions(self) -> list[int]:
        if self._partitions is None:
            out = self.topics.output
            md = self.consumer.list_topics(out, timeout=5)
            self._partitions = sorted(md.topics[out].partitions)
        return self._partitions

    def _output_end(self, partition: int) -> int:
        return int(self.consumer.get_watermark_offsets(
            TopicPartition(self.topics.output, partition), timeout=5, cached=False)[1])

    def count(self) -> int:
        try:
            return sum(self._output_end(p) for p in self._output_partitions())
        except Exception:
            return -1

    def follow(self) -> None:
        """Read the output topic from its end now on (read_committed, librdkafka's default:
        e1's aborted writes never count)."""
        self.consumer.assign([TopicPartition(self.topics.output, p, self._output_end(p))
                              for p in self._output_partitions()])

    def new_outputs(self, limit: int = 50_000) -> tuple[np.ndarray, np.ndarray, int]:
        """``(window_end, ingress ms, records read)`` of the outputs written since the last
        call (at most ``limit``); a record without a usable ``window_end`` (epoch ms, or an
        ISO-8601 time as a user's job's timestamp column is written) is read but not
        timed: the warm-up only times outputs, the read-back judges them."""
        ends, stamps = [], []
        seen = 0
        for msg in self.consumer.consume(num_messages=limit, timeout=0.2):
            if msg.error() is not None:
                continue
            seen += 1
            try:
                end = window_end_ms(orjson.loads(msg.value() or b"").get("window_end"))
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if end is not None:
                ends.append(end)
                stamps.append(msg.timestamp()[1])
        return np.array(ends, dtype=np.int64), np.array(stamps, dtype=np.int64), seen

    def unfollow(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.unassign()

    def input_end_offsets(self) -> dict[str, dict[int, int]]:
        """Current high watermarks of the input topics, per partition."""
        out: dict[str, dict[int, int]] = {}
        for topic in self.topics.inputs:
            md = self.consumer.list_topics(topic, timeout=10)
            out[topic] = {p: self.consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in md.topics[topic].partitions}
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()


def window_end_ms(value: object) -> int | None:
    """An output's ``window_end`` in epoch ms: an integer as SST and MST write it, or the
    ISO-8601 text Spark's ``to_json`` makes of a timestamp; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return int(when.timestamp() * 1000)
    return None


def has_watermark(progress: list[dict[str, Any]]) -> bool:
    """Does the query have an event-time watermark? Spark reports ``eventTime.watermark``
    only for a plan with one (``ProgressReporter``); a stateless job reports none."""
    return any("watermark" in (p.get("eventTime") or {}) for p in progress)


def processed_past(progress: list[dict[str, Any]], targets: dict[str, dict[int, int]]) -> bool:
    """Has the latest batch's end offset reached ``targets`` for every topic it reads?"""
    if not progress:
        return False
    sources = progress[-1].get("sources") or []
    seen = False
    for src in sources:
        end = src.get("endOffset") or {}
        if not isinstance(end, dict):
            continue
        for topic, parts in end.items():
            if topic not in targets:
                continue
            seen = True
            for part, target in targets[topic].items():
                if int(parts.get(str(part), 0)) < target:
                    return False
    return seen


def batches(driver: DriverProcess) -> list[dict[str, Any]]:
    return [p for p in driver.progress() if p.get("event") == "progress"]


def wait_first_trigger(driver: DriverProcess, timeout_s: float, log_hint: str) -> None:
    """Wait until the query reported its first trigger (a progress event)."""
    deadline = time.monotonic() + timeout_s
    while not batches(driver):
        driver.check()
        if time.monotonic() > deadline:
            raise EnvironmentFailure(f"the streaming query ran no trigger within {timeout_s:.0f} "
                                    f"s (see {log_hint})")
        time.sleep(0.2)


def wait_primed(driver: DriverProcess, monitor: OutputMonitor,
                on_status: Callable[[Status], None], timeout_s: float, log_hint: str) -> float:
    """Wait until the query has read everything in the input topics (the priming events);
    returns the seconds it took.

    One batch is not enough: the first batches over real volume run on cold JVMs
    (interpreted code, empty caches) and are several times slower than later ones, so
    priming events make the query do that work before T1.
    """
    t0 = time.monotonic()
    targets = monitor.input_end_offsets()
    while time.monotonic() - t0 < timeout_s:
        driver.check()
        progress = batches(driver)
        if processed_past(progress, targets):
            return time.monotonic() - t0
        on_status(Status("prime", time.monotonic() - t0, timeout_s, 0, 0.0, 0,
                         len(progress), note="warming up the query"))
        time.sleep(0.5)
    raise EnvironmentFailure(f"the streaming query did not read its warm-up events within "
                            f"{timeout_s:.0f} s (see {log_hint})")


@dataclass
class DrainOutcome:
    seconds: float
    caught_up_s: float | None
    timed_out: bool
    reason: Reason | None  # why the run cannot count as drained (kind observed)


def drain(driver: DriverProcess, monitor: OutputMonitor, closing_ts: int, watermark_delay_ms: int,
          timeout_s: float, on_status: Callable[[Status], None]) -> DrainOutcome:
    """Wait until the query has processed every input and emitted every real window.

    Done = the latest batch's end offsets reach the input topics' end offsets (closing
    events included) AND a batch has run with the watermark the closing events produce
    (``closing_ts - watermark``, past every real window's end) — unless the query has no
    watermark at all (a user's stateless job): then reading everything is all there is.
    Spark evicts — emits, in append mode — a window in the batch whose watermark reaches
    its end, and reports that batch's watermark in its progress, after the sink wrote it.
    So no "one more batch" and no quiet period are needed: the drain ends in the batch
    that finishes the work. A time-out or a dead driver is returned as a reason (the run
    becomes unknown).
    """
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    targets = monitor.input_end_offsets()
    wm_target = closing_ts - watermark_delay_ms
    caught_up_s: float | None = None
    while True:
        progress = batches(driver)
        caught = processed_past(progress, targets)
        wm = max((watermark_ms(p) for p in progress), default=0)
        now = time.monotonic()
        if caught and caught_up_s is None:
            caught_up_s = now - t0
        if caught and (wm >= wm_target or not has_watermark(progress)):
            return DrainOutcome(now - t0, caught_up_s, False, None)
        if now >= deadline:
            why = (f"the query read every input but its watermark stayed at {wm} < "
                   f"{wm_target}" if caught else "the query had not read every input")
            return DrainOutcome(now - t0, caught_up_s, True, Reason(
                "observed", f"the drain timed out after {timeout_s:.0f} s: {why}"))
        try:
            driver.check()
        except PgvalError as exc:
            return DrainOutcome(now - t0, caught_up_s, False, Reason(
                "observed", f"the driver died during the drain: {exc}"))
        note = ("waiting for the query to read all inputs" if not caught else
                "waiting for the watermark to close the last windows")
        on_status(Status("drain", now - t0, timeout_s, 0, 0.0, monitor.count(), len(progress),
                         note=note))
        time.sleep(0.25)
