"""What a job author imports from pgval: ``record_id()`` and the ``kafka`` object.

A record's ID is where Kafka put it, so a job needs no ID in its payload and a record
written twice is two records with two IDs, as Kafka sees it::

    ID = slot << 56 | partition << 40 | offset

``slot`` is the position of the record's input in the run (0 for the first input model's
topic, 1 for the second; the web log's ``get`` is 0 and ``post`` 1), ``partition`` is
below 65,536 and ``offset`` below 2^40. One definition serves both sides: the job builds
the Column (:func:`record_id`), pgval's reader computes the same numbers from the offsets it
read (:func:`record_ids`). A job adds ``F.collect_list(record_id()).alias("ids")`` to its
aggregation (``F.array(record_id())`` for a job with one output per input) and changes
nothing else.

A job function whose second parameter is named ``kafka`` gets a :class:`KafkaInputs`:
``kafka.reader(NAME)`` is a ``DataStreamReader`` set to the run's brokers, the run's
security settings and ``subscribe`` = the run's topic of input NAME; the job adds its own
options (``startingOffsets``, ``maxOffsetsPerTrigger``, …), calls ``.load()`` and parses
with its own schema. ``kafka.options(NAME)`` gives the same settings as a dict. In the
batch oracle the same calls give the records the run read back, as a batch DataFrame with
the Kafka source's columns, so the job's parsing runs on both sides unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pgval.core.errors import UserMistake
from pgval.core.record_ids import (
    OFFSET_BITS,
    SLOT_SHIFT,
    UNKNOWN_SLOT,
    record_ids,
)

__all__ = ["KafkaInputs", "RecordedReader", "record_id", "record_ids", "wants_kafka"]

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: The Kafka source's columns, as ``spark.readStream.format("kafka").load()`` gives them.
KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp",
                 "timestampType")

#: The topics of the run the job is being built for, in slot order; set by pgval (the
#: driver, the batch oracle) when it makes the ``kafka`` object.
_RUN_TOPICS: tuple[str, ...] = ()


def record_id(topic: str | Column = "topic", partition: str | Column = "partition",
              offset: str | Column = "offset") -> Column:
    """The record's ID as a Spark Column over the Kafka source's ``topic``, ``partition``
    and ``offset`` columns (name others if the job renamed them). Outside a pgval run every
    topic is slot 0."""
    from pyspark.sql import functions as F

    def col(c: str | Column) -> Column:
        return F.col(c) if isinstance(c, str) else c

    topics = _RUN_TOPICS
    if topics:
        slot = F.lit(UNKNOWN_SLOT).cast("long")
        for index in reversed(range(len(topics))):
            slot = F.when(col(topic) == F.lit(topics[index]), F.lit(index).cast("long")
                          ).otherwise(slot)
    else:
        slot = F.lit(0).cast("long")
    return (F.shiftleft(slot, SLOT_SHIFT)
            .bitwiseOR(F.shiftleft(col(partition).cast("long"), OFFSET_BITS))
            .bitwiseOR(col(offset).cast("long")))


class KafkaInputs:
    """The ``kafka`` a job gets: its inputs by name, read as the run reads them."""

    def __init__(self, spark: SparkSession, topics: Mapping[str, str],
                 options: Mapping[str, str], recorded: Mapping[str, DataFrame] | None = None
                 ) -> None:
        global _RUN_TOPICS
        self._spark = spark
        self._topics = dict(topics)
        self._options = dict(options)
        self._recorded = dict(recorded) if recorded is not None else None
        _RUN_TOPICS = tuple(self._topics.values())

    @property
    def topics(self) -> dict[str, str]:
        """Each input's topic in this run."""
        return dict(self._topics)

    @property
    def spark(self) -> SparkSession:
        return self._spark

    @property
    def names(self) -> tuple[str, ...]:
        """The run's inputs, in slot order."""
        return tuple(self._topics)

    def _topic(self, name: str) -> str:
        if name not in self._topics:
            raise UserMistake(f"the job reads input {name!r}, which this run does not have "
                              f"(it has {', '.join(self._topics)})")
        return self._topics[name]

    def options(self, name: str) -> dict[str, str]:
        """The Kafka source's options for input ``name``: brokers, security, subscribe."""
        return {**self._options, "subscribe": self._topic(name)}

    def reader(self, name: str) -> Any:
        """A ``DataStreamReader`` for input ``name`` (in the batch oracle: a reader of the
        records the run read back, which takes the same calls)."""
        topic = self._topic(name)
        if self._recorded is not None:
            return RecordedReader(self._recorded[name])
        reader = self._spark.readStream.format("kafka")
        for key, value in {**self.options(name), "subscribe": topic}.items():
            reader = reader.option(key, value)
        return reader


class RecordedReader:
    """A reader of records already read: takes a ``DataStreamReader``'s calls (options,
    schema, format) and ignores them, and ``load()`` gives the records as a batch
    DataFrame with the Kafka source's columns. Source options only decide how a stream
    cuts its input into micro-batches, never which records it reads in all."""

    def __init__(self, frame: DataFrame) -> None:
        self._frame = frame

    def option(self, _key: str, _value: Any) -> RecordedReader:
        return self

    def options(self, **_options: Any) -> RecordedReader:
        return self

    def format(self, _source: str) -> RecordedReader:
        return self

    def schema(self, _schema: Any) -> RecordedReader:
        return self

    def load(self, *_args: Any, **_kwargs: Any) -> DataFrame:
        return self._frame


def wants_kafka(parameters: Sequence[str]) -> bool:
    """A job function reads Kafka itself when its second parameter is named ``kafka``."""
    return len(parameters) >= 2 and parameters[1] == "kafka"
