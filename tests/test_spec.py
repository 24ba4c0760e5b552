"""The frozen run spec: nothing changes a spec once made, only :func:`pgval.config.resolve`
reads a schedule file, the stored form gives the same spec back, and the matrix key of a
spec is the one the mutable configuration before it had (stored matrices resume by it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pgval.config import resolve
from pgval.core.errors import UserMistake
from pgval.core.schema import Fault
from pgval.core.spec import ClusterSpec, RunSpec, ScheduledFault


def test_a_spec_is_frozen_and_so_are_its_settings() -> None:
    spec = RunSpec(spark_conf={"spark.sql.shuffle.partitions": "4"},
                   cluster=ClusterSpec(spark_daemon_conf={"spark.worker.timeout": "10"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.rate = 5.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.cluster.workers = 5  # type: ignore[misc]
    for settings in (spec.spark_conf, spec.kafka_config, spec.cluster.spark_daemon_conf):
        with pytest.raises(TypeError):
            settings["spark.sql.shuffle.partitions"] = "8"
        with pytest.raises(TypeError):
            settings.update({"x": "y"})
        with pytest.raises(TypeError):
            settings.pop("spark.sql.shuffle.partitions", None)
        with pytest.raises(TypeError):
            settings.clear()
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "4"}
    changed = spec.replace(spark_conf={"spark.sql.shuffle.partitions": "8"})
    assert changed.spark_conf == {"spark.sql.shuffle.partitions": "8"}
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "4"}  # a new spec, this kept


def test_resolve_is_the_one_reader_of_a_schedule_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "chaos.json"
    spec = RunSpec(schedule_file=str(missing))  # made without reading anything
    assert spec.schedule is None and spec.fault is Fault.NONE and not spec.resolved
    with pytest.raises(UserMistake) as err:
        resolve(spec)
    assert str(err.value).startswith(f"cannot read the schedule {missing}")
    assert "\n" not in str(err.value)
    missing.parent.mkdir()
    missing.write_text('[{"fault": "crash", "at": 1, "for": 5}]')
    resolved = resolve(spec)
    assert resolved.fault is Fault.SCHEDULE and resolved.schedule_origin == "file: chaos.json"
    assert resolved.schedule_parts == (ScheduledFault(Fault.CRASH, 1.0, 5.0),)
    missing.unlink()  # a resolved spec holds its parts: resolving it again reads nothing
    assert resolve(resolved).schedule == resolved.schedule


@pytest.mark.parametrize("given", [
    {},
    {"fault": "driver-crash", "restart_delay_s": 2.0, "pg": "e1"},
    {"fault": "crash+partition", "phase_seconds": 30, "cluster": {"workers": 3},
     "window_ms": 5000},
    {"fault": "random", "fault_count": 3, "seed": 7, "phase_seconds": 60},
])
def test_a_resolved_spec_comes_back_from_its_record(given: dict) -> None:
    """Every field but ``restart`` (the user's Kafka and Spark values are stored redacted,
    so a spec without any)."""
    spec = resolve(given)
    back = RunSpec.from_record(spec.to_record())
    assert back.resolved and back.restart_policy is spec.restart_policy
    assert back.restart is spec.restart_policy  # stored as the policy the run applied
    for f in dataclasses.fields(RunSpec):
        if f.name != "restart":
            assert getattr(back, f.name) == getattr(spec, f.name), f.name
    assert dataclasses.replace(back, restart=spec.restart) == spec


def test_the_matrix_key_of_a_spec_is_the_one_stored_before() -> None:
    """Computed by the mutable configuration the spec replaced: stored matrices resume."""
    assert RunSpec().shape().key() == RunSpec.from_record(RunSpec().to_record()).shape().key()
    assert RunSpec(fault="driver-crash").shape().key() == "26398bd4029e"
    assert resolve({"fault": "driver-crash"}, fault_axis=True).shape().key() == "26398bd4029e"
