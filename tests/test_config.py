"""Typed configuration and the one run shape: names parsed once into pgval.core.schema's enums,
the crash-point rules read from one table, and one RunShape behind the matrix key, the OIR
shape and the report's grouping — whose stored formats must not change."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgval.campaigns.matrix import cells, matrix_key, plan, rates_at
from pgval.campaigns.oir import OirNotStored, oir_for, trial_config
from pgval.cli import main
from pgval.config import check, resolve
from pgval.core.errors import PgvalError, UserMistake
from pgval.core.schema import CrashPoint, Deploy, Fault, FaultSpec, Guarantee, Restart, Topology
from pgval.core.shape import REPORTED, RunShape
from pgval.core.spec import ClusterSpec, RunSpec


def test_names_are_parsed_once_into_members() -> None:
    cfg = RunSpec(topology="mst", pg="e1", fault="driver-crash",
                  crash_point="after-sink-write", deploy="local")
    assert cfg.topology is Topology.MST and cfg.pg is Guarantee.E1
    assert cfg.fault is Fault.DRIVER_CRASH and cfg.deploy is Deploy.LOCAL
    assert cfg.fault_spec == FaultSpec.parse("driver-crash@after-sink-write")
    assert dataclasses.replace(cfg, fault="crash").fault is Fault.CRASH  # replace parses too
    assert cfg.to_record()["fault"] == "driver-crash"  # stored as the plain name


@pytest.mark.parametrize(("field", "sentence"), [
    ("topology", "unknown topology 'xst'; use one of sst, mst"),
    ("pg", "unknown processing guarantee 'xst'; use one of a1, e1, m1"),
    ("fault", "unknown fault 'xst'; use one of none, crash, driver-crash, "
              "delay-lt-timeout, delay-gt-timeout"),
    ("crash_point", "unknown crash point 'xst'"),
    ("deploy", "unknown deployment 'xst'; use one of local, compose, external"),
])
def test_an_unknown_name_is_one_sentence(field: str, sentence: str) -> None:
    with pytest.raises(PgvalError) as err:
        RunSpec(**{field: "xst"})
    assert str(err.value).startswith(sentence) and "\n" not in str(err.value)


@pytest.mark.parametrize(("spec", "deploy", "problem"), [
    ("crash", "compose", None),
    ("crash@during-sink-write", "local", None),
    ("driver-crash@after-sink-write", "external", None),
    ("crash@after-sink-write", "local", "--crash-point after-sink-write applies to --fault "
                                        "driver-crash"),
    ("driver-crash@during-sink-write", "local", "--crash-point during-sink-write applies to "
                                                "--fault crash on the embedded cluster "
                                                "(--deploy local)"),
    ("crash@during-sink-write", "external", "--crash-point during-sink-write applies to "
                                            "--fault crash on the embedded cluster "
                                            "(--deploy local)"),
    ("driver-crash@after-sink-write", "compose", "crash points other than timed need the "
                                                 "driver on this machine (--deploy local "
                                                 "or external)"),
])
def test_one_table_says_which_crash_point_applies_where(spec: str, deploy: str,
                                                        problem: str | None) -> None:
    assert FaultSpec.parse(spec).problem(deploy) == problem
    fault, _, point = spec.partition("@")
    cfg = RunSpec(fault=fault, crash_point=point or "timed", deploy=deploy,
                  bootstrap="b:1" if deploy == "external" else None,
                  master="spark://m:1" if deploy == "external" else None)
    if problem is None:
        resolve(cfg)
    else:
        with pytest.raises(PgvalError, match=problem.split(" (")[0]):
            resolve(cfg)


# ------------------------------------------------------------------------------ run shape
SECRETS = RunSpec(deploy="external", bootstrap="b:9092", master="spark://u:pw@m:7077",
                  kafka_config={"sasl.password": "hunter2",
                                "security.protocol": "SASL_SSL"},
                  spark_conf={"spark.sql.shuffle.partitions": "4"}, fault="crash",
                  pg="e1", seed=5, rate=3000.0)


def test_the_matrix_key_keeps_its_stored_format() -> None:
    """Pinned values of the key (existing databases resume by them). They changed once on
    purpose, with the current measurement model: the warm-up until steady and the restart
    policy change what a run measures, so a matrix begun before must not be resumed by runs
    made after (the settings gained warmup_max_seconds, restart and restart_delay_s)."""
    assert matrix_key(SECRETS) == "db8179d69229"
    assert matrix_key(SECRETS, 0.5) == "5f25c3684534"
    assert matrix_key(RunSpec()) == "26398bd4029e"
    assert matrix_key(RunSpec(cluster=ClusterSpec(workers=3))) == "69c810e1090c"


def test_the_oir_shape_is_a_view_of_the_run_shape() -> None:
    shape = SECRETS.shape().oir()
    assert shape["master"] == "spark://<redacted>@m:7077"
    assert shape["spark_conf"] == {"spark.sql.shuffle.partitions": "sha256:4b227777d4dd"}
    assert shape["shuffle_partitions"] == SECRETS.cluster.partitions  # the effective value
    assert "hunter2" not in SECRETS.shape().settings
    assert "phase_seconds" not in shape and "rate" not in shape


def test_a_shape_leaves_out_the_seed_and_keeps_the_cell() -> None:
    a, b = SECRETS.shape(), dataclasses.replace(SECRETS, seed=99).shape()
    assert a == b and hash(a) == hash(b)  # repetitions are the same experiment
    assert a.fault_spec == FaultSpec(Fault.CRASH) and a.pg is Guarantee.E1
    assert a != dataclasses.replace(SECRETS, rate=6000.0).shape()


def test_a_stored_run_of_any_age_has_a_shape() -> None:
    """What the report reads: names it does not know kept as text, missing settings as
    they were meant then."""
    shape = RunShape.of({"topology": "xst", "fault": "crash", "rate": 5})
    assert shape.topology == "xst" and shape.fault is Fault.CRASH and shape.pg is None
    assert shape.value("deploy") == "local" and shape.value("crash_point") == "timed"
    assert shape.value("rate") == 5 and shape.value("phase_seconds") is None
    assert RunShape.of({"crash_point": "during-sink-write"}).value("crash_point") == \
        CrashPoint.DURING_SINK_WRITE


# ------------------------------------------------------------------------ campaign policy
def test_a_plan_leaves_out_cells_once_and_refuses_wrong_options() -> None:
    grid = cells(["sst"], ["a1", "e1"], ["crash@during-sink-write", "none"], 3)
    said: list[str] = []
    kept = plan(RunSpec(), grid, on_left_out=lambda c, why: said.append(c.label()))
    assert said == ["sst e1 crash@during-sink-write #0"]  # once, not per repetition
    assert len(kept) == 9 and all(str(c.fault) == "none" or c.pg == "a1" for c in kept)
    with pytest.raises(PgvalError, match="applies to --fault crash"):
        plan(RunSpec(deploy="compose"), grid, on_left_out=lambda c, why: None)


def test_rates_at_the_oir_are_looked_up_once_per_pair_that_runs() -> None:
    grid = cells(["sst", "mst"], ["a1"], ["none", "crash"], 2)
    asked: list[tuple[str, str]] = []

    def oir_of(cfg: RunSpec) -> float:
        asked.append((cfg.topology, cfg.pg))
        return 1000.0 if cfg.topology == "sst" else 400.0

    rate_for = rates_at(grid, RunSpec(), 0.5, oir_of)
    assert asked == [("sst", "a1"), ("mst", "a1")]
    assert {c.topology: rate_for(c) for c in grid} == {"sst": 500.0, "mst": 200.0}
    assert rates_at([], RunSpec(), 0.5, oir_of) and len(asked) == 2


def test_a_trial_is_the_base_at_a_rate_without_a_fault(tmp_path) -> None:  # noqa: ANN001
    base = RunSpec(fault="crash", phase_seconds=5)
    trial = trial_config(base, 4000.0)
    assert trial.fault is Fault.NONE and trial.rate == 4000.0 and trial.phase_seconds == 5
    assert trial.cluster is not base.cluster
    with pytest.raises(OirNotStored, match="no optimum ingestion rate is stored for sst a1"):
        oir_for(tmp_path / "none.db", base)


# ------------------------------------------------------------------------ restart policy
@pytest.mark.parametrize(("fault", "deploy", "policy"), [
    ("driver-crash", "local", Restart.IMMEDIATE),   # as under a supervisor
    ("driver-crash", "external", Restart.IMMEDIATE),  # the driver is local everywhere
    ("crash", "local", Restart.AT_REMOVE),          # the paper's process crash
    ("crash", "compose", Restart.AT_REMOVE),        # pgval starts the container again
    ("crash", "external", None),                    # Spark replaces the executor itself
    ("delay-gt-timeout", "local", None),
    ("none", "local", None),
])
def test_each_fault_has_its_default_restart_policy(fault: str, deploy: str,
                                                   policy: Restart | None) -> None:
    external = {"bootstrap": "b:1", "master": "spark://m:1"} if deploy == "external" else {}
    nemesis = ({"nemesis_inject": "true", "nemesis_remove": "true"}
               if deploy == "external" and fault.startswith("delay") else {})
    cfg = resolve(RunSpec(fault=fault, deploy=deploy, **external, **nemesis))
    assert cfg.restart is None and cfg.restart_policy is policy
    assert cfg.to_record()["restart"] == policy  # stored as applied: the report groups by it


def test_an_attached_cluster_replaces_its_executors_itself() -> None:
    cfg = resolve({"fault": "crash", "running_cluster": "/somewhere"})
    assert cfg.restart_policy is None
    with pytest.raises(PgvalError, match="Spark's cluster manager replaces"):
        resolve(cfg, restart="at-remove")


@pytest.mark.parametrize(("changes", "sentence"), [
    ({"fault": "none", "restart": "immediate"},
     "--restart applies to --fault crash, driver-crash and broker-crash (nothing restarts "
     "under --fault none)"),
    ({"fault": "delay-lt-timeout", "restart": "at-remove"}, "nothing restarts under --fault"),
    ({"fault": "crash", "deploy": "external", "bootstrap": "b:1", "master": "spark://m:1",
      "restart": "immediate"}, "does not apply to crash on a cluster pgval does not own"),
    ({"fault": "crash", "restart_delay_s": 3.0},
     "--restart-delay-s applies to --restart immediate"),
    ({"fault": "driver-crash", "restart": "at-remove", "restart_delay_s": 3.0},
     "--restart-delay-s applies to --restart immediate"),
    ({"fault": "driver-crash", "restart_delay_s": 90.0}, "shorter than a phase"),
    ({"fault": "crash", "restart": "sometimes"}, "unknown restart policy 'sometimes'"),
    ({"warmup_seconds": 30.0, "warmup_max_seconds": 20.0}, "must not be below --warmup-seconds"),
])
def test_restart_settings_that_mean_nothing_are_refused(changes: dict, sentence: str) -> None:
    with pytest.raises(PgvalError, match=re.escape(sentence)):
        resolve(changes)


def test_restart_settings_that_mean_something_are_taken() -> None:
    for changes in ({"fault": "crash", "restart": "immediate", "restart_delay_s": 5.0},
                    {"fault": "driver-crash", "restart": "at-remove"},
                    {"fault": "driver-crash", "restart_delay_s": 2.0}):
        resolve(changes)


def test_a_matrix_gives_the_restart_policy_to_the_cells_it_fits() -> None:
    base = resolve({"restart": "immediate", "restart_delay_s": 2.0},
                   fault_axis=True)  # the base's fault is a placeholder
    with pytest.raises(PgvalError):
        check(base)
    grid = plan(base, cells(["sst"], ["a1"], ["none", "crash", "driver-crash",
                                              "delay-lt-timeout"], 1), lambda c, r: None)
    got = {str(c.fault): (resolve(c.config(base)).restart_policy,
                          c.config(base).restart_delay_s) for c in grid}
    assert got == {"none": (None, 0.0), "delay-lt-timeout": (None, 0.0),
                   "crash": (Restart.IMMEDIATE, 2.0), "driver-crash": (Restart.IMMEDIATE, 2.0)}
    # The defaults per cell when the matrix names no policy; a delay only where immediate.
    plain = RunSpec(restart_delay_s=2.0)
    got = {str(c.fault): (resolve(c.config(plain)).restart_policy,
                          c.config(plain).restart_delay_s)
           for c in plan(plain, cells(["sst"], ["a1"], ["crash", "driver-crash"], 1),
                         lambda c, r: None)}
    assert got == {"crash": (Restart.AT_REMOVE, 0.0), "driver-crash": (Restart.IMMEDIATE, 2.0)}
    # The key hashes the matrix's choice: the same for every cell, another for another choice.
    assert matrix_key(base) != matrix_key(RunSpec(restart="at-remove"))
    assert matrix_key(dataclasses.replace(base, fault="crash")) == matrix_key(base)


def test_a_matrix_refuses_a_restart_policy_no_cell_takes() -> None:
    base = RunSpec(restart="at-remove")
    with pytest.raises(PgvalError, match="this grid has none"):
        plan(base, cells(["sst"], ["a1"], ["none", "delay-gt-timeout"], 1), lambda c, r: None)
    with pytest.raises(PgvalError, match="this grid has none"):  # crash: at-remove
        plan(RunSpec(restart_delay_s=1.0), cells(["sst"], ["a1"], ["crash"], 1),
             lambda c, r: None)


@pytest.mark.parametrize(("params", "restart", "delay"), [
    ({"fault": "driver-crash"}, "at-remove", 0.0),       # stored before policies: at T3
    ({"fault": "crash"}, "at-remove", 0.0),
    ({"fault": "driver-crash", "restart": "immediate", "restart_delay_s": 2.0}, "immediate", 2.0),
    ({"fault": "none"}, None, None),                     # nothing restarts: no value
    ({"fault": "delay-lt-timeout", "restart": None, "restart_delay_s": 0.0}, None, None),
])
def test_the_shape_says_what_a_stored_run_restarted_by(params: dict, restart: str | None,
                                                       delay: float | None) -> None:
    shape = RunShape.of({"topology": "sst", "pg": "a1", **params})
    assert (shape.value("restart"), shape.value("restart_delay_s")) == (restart, delay)
    assert {"restart", "restart_delay_s"} <= set(REPORTED)


@pytest.mark.parametrize(("args", "needle"), [
    (["validate", "--topology", "sst", "--restart", "immediate"],
     "--restart applies to --fault crash, driver-crash and broker-crash"),
    (["validate", "--topology", "sst", "--fault", "crash", "--restart-delay-s", "2"],
     "--restart-delay-s applies to --restart immediate"),
    (["matrix", "--faults", "none,delay-lt-timeout", "--restart", "at-remove"],
     "this grid has none"),
])
def test_the_command_line_refuses_a_restart_that_means_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], needle: str) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, args)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and needle in lines[0], res.output
    assert os.listdir(tmp_path) == []  # refused before anything exists


def test_oir_has_no_restart_options() -> None:
    res = CliRunner().invoke(main, ["oir", "--topology", "sst", "--restart", "immediate"])
    assert res.exit_code == 2 and "No such option" in res.output


def test_an_output_row_too_big_for_a_kafka_record_is_warned_before_the_run() -> None:
    """The estimate is what run 140 of the example database measured: at 200,000 ev/s, 10 s
    windows and 16 resources a row was 1,138,584 bytes (125,000 IDs)."""
    from pgval.core.schema import MAX_RECORD_BYTES

    ids, size = RunSpec(rate=200_000, window_ms=10_000, resources=16,
                                 topology="sst").output_row_estimate()
    assert ids == 125_000 and abs(size - 1_138_584) / 1_138_584 < 0.05
    assert RunSpec(rate=200_000, topology="sst").output_row_warning() is None
    big = RunSpec(rate=3_000_000, window_ms=10_000, resources=16, topology="sst")
    assert big.output_row_estimate()[1] > MAX_RECORD_BYTES
    assert "1,875,000 IDs" in (big.output_row_warning() or "")
    # Files take any row: nothing to warn about.
    assert RunSpec(rate=3_000_000, topology="sst", sink="files",
                            pg="e1").output_row_warning() is None


@pytest.mark.parametrize("template", ["tc {worker.real}", "tc {worker:99999999999}",
                                      "tc {token}"])
def test_a_nemesis_template_is_checked_when_the_options_are_read(template: str) -> None:
    """A placeholder pgval cannot fill is one sentence before anything starts, not at T2."""
    with pytest.raises(UserMistake, match="has a placeholder other than"):
        resolve({"topology": "sst", "deploy": "external", "bootstrap": "k:9092",
                 "master": "local[1]", "fault": "delay-gt-timeout",
                 "nemesis_inject": template, "nemesis_remove": "tc del"})
