"""Evidence, recheck and export on constructed runs (no cluster).

The property that matters: a run re-checked from its kept records, and its exported
streams under `pgval check`, give the counts a record-by-record reference computes from
what was written (tests/reference.py), whatever the anomalies, malformed records and
control events in them.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgval.checker.evaluate import evaluate
from pgval.cli import main
from pgval.core.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC
from pgval.evidence.bundle import (
    Manifest,
    load_streams,
    load_topic,
    save_topic,
    set_aside_control,
    streams_from_records,
)
from pgval.evidence.export import export
from pgval.evidence.recheck import recheck
from pgval.kafka.topic_records import TopicRecords
from pgval.oracle.expected import expected_outputs
from pgval.records.parse import read_streams
from pgval.records.phases import Phases
from tests.reference import ref_validate
from tests.strategies import input_events, produced_outputs, to_inputs

W = 100
CONTROL = [-(2**41) - 50, -(2**41)]  # outside the strategies' ID range


def topic(values: list[bytes | None], timestamps: list[int], name: str,
          partitions: int = 2) -> TopicRecords:
    """Records spread over partitions round-robin, offsets dense per partition."""
    parts = np.arange(len(values), dtype=np.int32) % partitions
    offs = np.zeros(len(values), dtype=np.int64)
    for p in range(partitions):
        sel = np.flatnonzero(parts == p)
        offs[sel] = np.arange(len(sel))
    ends = {p: int((parts == p).sum()) for p in range(partitions)}
    return TopicRecords(keys=[None] * len(values), values=values,
                        timestamps=np.asarray(timestamps, dtype=np.int64), partitions=parts,
                        offsets=offs, topic=name, end_offsets=ends, reached=dict(ends))


def build_run(run_dir: Path, inputs: list[dict], outputs: list[dict], garbage: list[bytes],
              control: int) -> Manifest:
    """Write a run's evidence as validate would: raw values, control events, garbage."""
    control_ids = list(range(CONTROL[1], CONTROL[1] - control, -1))
    by_topic: dict[str, tuple[list, list]] = {GET_TOPIC: ([], []), POST_TOPIC: ([], [])}
    for e in inputs:
        t = GET_TOPIC if e["type"] == "GET" else POST_TOPIC
        value = {k: v for k, v in e.items() if k != "ingress_ts"}
        by_topic[t][0].append(orjson.dumps(value))
        by_topic[t][1].append(e["ingress_ts"])
    for k, ident in enumerate(control_ids):
        by_topic[GET_TOPIC][0].append(orjson.dumps(
            {"id": ident, "type": "GET", "resource": "r0", "event_ts": 10_000 + k}))
        by_topic[GET_TOPIC][1].append(500)
    for g in garbage:
        by_topic[POST_TOPIC][0].append(g)
        by_topic[POST_TOPIC][1].append(7)
    out_values, out_ts = [], []
    for o in outputs:
        out_values.append(orjson.dumps({k: v for k, v in o.items() if k != "ingress_ts"}))
        out_ts.append(o["ingress_ts"])
    if control_ids:  # a control-only output and a mixed one: both lose exactly the control IDs
        out_values.append(orjson.dumps({"window_start": 10_000, "resource": "r0",
                                        "count": len(control_ids), "ids": control_ids}))
        out_ts.append(600)
    out_values += garbage
    out_ts += [8] * len(garbage)
    for name, (values, ts) in by_topic.items():
        save_topic(run_dir, topic(values, ts, name))
    save_topic(run_dir, topic(out_values, out_ts, OUTPUT_TOPIC, partitions=3))
    manifest = Manifest(topology="sst", window_ms=W, phases=[50, 150, 250], t4=350,
                        resources=3, control_ids=[CONTROL[1] - control + 1, CONTROL[1]]
                        if control else None, control_events=control)
    manifest.write(run_dir)
    return manifest


GARBAGE = st.lists(st.sampled_from([b"not json", b"", b'{"id": 1, "ids": [1, "x"]}', b"[1,2]",
                                    b'{"window_start": 0}', b"{\n}"]), max_size=4)


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[dict], list[dict], list[bytes], int]:
    inputs = draw(input_events(max_size=40))
    expected = expected_outputs(to_inputs(inputs), "sst", W).to_records()
    outputs = draw(produced_outputs(expected))
    return inputs, outputs, draw(GARBAGE), draw(st.integers(0, 5))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(run=runs())
def test_recheck_and_export_agree_with_the_reference(tmp_path_factory: pytest.TempPathFactory,
                                                run: tuple) -> None:
    inputs, outputs, garbage, control = run
    run_dir = tmp_path_factory.mktemp("run")
    manifest = build_run(run_dir, inputs, outputs, garbage, control)
    # The answer, computed record by record from what was written (not from the files).
    ref = ref_validate(inputs, outputs, "sst", W, (50, 150, 250))
    want = {"expected": ref.expected, "processed": ref.processed, "duplicate": ref.duplicate,
            "incorrect": ref.incorrect, "unprocessed": ref.unprocessed,
            "malformed": len(garbage),  # every garbage value is also in the output topic
            "reliability": ref.reliable / ref.expected if ref.expected else None,
            "phases": ref.phases}
    again = recheck(run_dir)
    assert {k: again.summary()[k] for k in want} == want
    assert again.evaluation.validation.malformed_inputs == len(garbage)  # and in POST
    assert load_streams(run_dir).control_inputs == control
    # Export → pgval check gives the same counts, line order standing in for stream order.
    out = tmp_path_factory.mktemp("export")
    info = export(run_dir, out)
    assert info["phases"] == manifest.phases
    checked = evaluate(*read_streams(out / "inputs.jsonl", out / "outputs.jsonl"), "sst", W,
                       Phases(*info["phases"]))
    assert {k: checked.summary()[k] for k in want} == want
    assert checked.validation.malformed_inputs == len(garbage)
    assert_anomalies_point_into_the_export(out, checked.anomalies().to_pylist())


def assert_anomalies_point_into_the_export(out: Path, checked: list[dict[str, Any]]) -> None:
    """The exported anomalies name outputs by their record number in the exported
    outputs.jsonl, as `pgval check --anomalies` of those files does; not by their place in
    the output topic, which counts the control outputs and unreadable records set aside."""
    exported = [json.loads(line) for line in
                (out / "anomalies.jsonl").read_text(encoding="utf-8").splitlines()]
    lines = (out / "outputs.jsonl").read_text(encoding="utf-8").splitlines()

    def key(a: dict[str, Any]) -> tuple:
        return a["kind"], a["id"], a["ts_ms"], a["output"] is None, a["output"] or 0, \
            a["first_output"] is None, a["first_output"] or 0

    assert sorted(map(key, exported)) == sorted(map(key, checked))
    for a in exported:
        for name in ("output", "first_output"):
            if a[name] is not None:
                assert a["id"] in json.loads(lines[a[name]])["ids"], (name, a)


def test_only_pgvals_own_control_ids_are_set_aside(tmp_path: Path) -> None:
    """A negative ID pgval did not write is a foreign ID (incorrect), never erased."""
    inputs = [{"id": 1, "type": "GET", "resource": "r0", "event_ts": 5, "ingress_ts": 60}]
    outputs = [{"window_start": 0, "window_end": W, "resource": "r0", "count": 2,
                "ids": [1, -7], "ingress_ts": 70},
               {"window_start": 0, "window_end": W, "resource": "r1", "count": 1,
                "ids": [CONTROL[1]], "ingress_ts": 71}]
    build_run(tmp_path, inputs, outputs, [], control=3)
    s = load_streams(tmp_path)
    assert s.control_outputs == 2 and s.control_occurrences == 1 + 3
    ev = recheck(tmp_path).evaluation.validation
    assert (ev.expected, ev.processed, ev.incorrect) == (1, 1, 1)
    assert ev.ids("incorrect").tolist() == [-7]


def test_set_aside_control_keeps_other_ids_of_a_mixed_output() -> None:
    recs = topic([orjson.dumps({"window_start": 0, "resource": "r0", "ids": [-1, 4, -2, -9]})],
                 [5], OUTPUT_TOPIC, partitions=1)
    s = streams_from_records({}, recs, 1, [-2, -1])
    assert s.outputs.ids.tolist() == [4, -9]
    kept, dropped, removed = set_aside_control(s.outputs, None)
    assert (dropped, removed) == (0, 0) and kept is s.outputs


def test_manifest_round_trip(tmp_path: Path) -> None:
    m = Manifest(topology="mst", window_ms=5, phases=[1, 2, 3], t4=4, control_ids=[-9, -1],
                 readback={"get": {"complete": True}}, valid=False,
                 validity_reasons=["drain timed out"], config={"rate": 5.0})
    m.write(tmp_path)
    assert Manifest.read(tmp_path) == m


def test_recheck_and_export_cli(tmp_path: Path) -> None:
    inputs = [{"id": i, "type": "GET", "resource": "r0", "event_ts": 60 + i, "ingress_ts": 60 + i}
              for i in range(5)]
    outputs = [{"window_start": 0, "window_end": W, "resource": "r0", "count": 5,
                "ids": [0, 1, 2, 3, 4, 4], "ingress_ts": 120}]
    run_dir = tmp_path / "run"
    build_run(run_dir, inputs, outputs, [b"garbage"], control=2)
    res = CliRunner().invoke(main, ["recheck", str(run_dir), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert (out["expected"], out["duplicate"], out["malformed"]) == (5, 1, 1)
    assert out["guarantee"] == "none" and "valid" in out and "validity_reasons" in out
    res = CliRunner().invoke(main, ["export", str(run_dir), "--out", str(tmp_path / "x")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "x" / "run.json").exists()


@pytest.mark.parametrize("garbage", [[], [b"garbage"]])
def test_export_prints_a_check_command_that_pastes_as_printed(tmp_path: Path,
                                                             garbage: list[bytes]) -> None:
    """The suggested `pgval check` is one line however long (it once broke inside
    --phases at the console's width), quoted for the shell (a folder with a space and
    brackets), and, run as printed, gives the re-check's counts (with --allow-malformed
    when the export holds unreadable records as malformed lines)."""
    inputs = [{"id": i, "type": "GET", "resource": "r0", "event_ts": 60 + i, "ingress_ts": 60 + i}
              for i in range(5)]
    outputs = [{"window_start": 0, "window_end": W, "resource": "r0", "count": 5,
                "ids": [0, 1, 2, 3, 4, 4], "ingress_ts": 120}]
    run_dir = tmp_path / "run"
    build_run(run_dir, inputs, outputs, garbage, control=2)
    out = tmp_path / ("a long folder [x] " + "y" * 90)
    res = CliRunner().invoke(main, ["export", str(run_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("  pgval check "))
    args = shlex.split(line)
    assert args[args.index("--inputs") + 1] == str(out / "inputs.jsonl")
    assert args[args.index("--phases") + 1] == "50,150,250"
    assert ("--allow-malformed" in args) == bool(garbage)
    checked = CliRunner().invoke(main, args[1:])
    assert checked.exit_code == 0, checked.output
    again = json.loads(CliRunner().invoke(main, ["recheck", str(run_dir), "--json"]).output)
    got = json.loads(checked.output)
    assert {k: got[k] for k in ("expected", "duplicate", "malformed")} == \
        {k: again[k] for k in ("expected", "duplicate", "malformed")}


@pytest.mark.parametrize("args,msg", [
    (["recheck", "/nonexistent/run"], "neither a run directory nor a run id"),
    (["recheck", "12"], "needs --db"),
    (["export", "12", "--out", "x"], "needs --db"),
])
def test_recheck_bad_runs_are_one_line(tmp_path: Path, args: list[str], msg: str) -> None:
    res = CliRunner().invoke(main, args)
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and msg in flat and "Traceback" not in res.output


def test_recheck_of_a_directory_without_evidence(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["recheck", str(tmp_path)])
    assert res.exit_code == 2 and "holds no evidence" in " ".join(res.output.split())


def stored_one_event_run(tmp_path: Path) -> tuple[Path, Path, Any, int]:
    """A run directory with one unprocessed GET, and its row in a new results database."""
    from pgval.store.results import ResultsStore

    run_dir = tmp_path / "run"
    build_run(run_dir, [{"id": 1, "type": "GET", "resource": "r0", "event_ts": 60,
                         "ingress_ts": 60}], [], [], control=0)
    db = tmp_path / "r.db"
    store = ResultsStore(db)
    run_id = store.start_run("validate", "sst", W, params={"run_dir": str(run_dir)})
    return run_dir, db, store, run_id


def test_recheck_by_run_id_finds_the_directory(tmp_path: Path) -> None:
    run_dir, db, store, run_id = stored_one_event_run(tmp_path)
    res = CliRunner().invoke(main, ["recheck", str(run_id), "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["unprocessed"] == 1


def test_a_database_carries_its_runs_evidence_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run directory left with the machine that made it, and its evidence copied to
    ``evidence/run-<id>/`` beside the database (experiments/grid-23/): recheck and export by
    run id find the copy (also when the run directory is still there without its evidence,
    and with the database named by a relative path) and hold it to the stored hashes; an
    edited copy is refused, and with no copy the sentence says where one would be."""
    import shutil

    from tests.test_evidence_seal import stored_sealed_run

    run_dir, db, run_id = stored_sealed_run(tmp_path)
    args = ["recheck", str(run_id), "--db", str(db), "--json"]
    expected = json.loads(CliRunner().invoke(main, args).output)
    shipped = tmp_path / "evidence" / f"run-{run_id}"
    shutil.copytree(run_dir / "evidence", shipped / "evidence")
    shutil.rmtree(run_dir)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got == expected and got["duplicate"] == 1
    res = CliRunner().invoke(main, ["recheck", str(run_id), "--db", str(db)])
    assert res.exit_code == 0 and "evidence verified" in res.output, res.output
    res = CliRunner().invoke(main, ["export", str(run_id), "--db", str(db),
                                    "--out", str(tmp_path / "out")])
    assert res.exit_code == 0 and (tmp_path / "out" / "outputs.jsonl").exists(), res.output
    run_dir.mkdir()  # the directory is back, its evidence is not
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["recheck", str(run_id), "--db", db.name, "--json"])
    assert res.exit_code == 0 and json.loads(res.output) == expected, res.output

    output = shipped / "evidence" / "output.parquet"
    output.write_bytes(output.read_bytes() + b"\0")
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 3 and "output.parquet" in res.output, res.output
    shutil.rmtree(tmp_path / "evidence")
    run_dir.rmdir()
    res = CliRunner().invoke(main, args)
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and "no longer exists" in flat and "evidence/run-" in flat


def test_recheck_store_rewrites_derived_measures_only_when_counts_agree(
        tmp_path: Path) -> None:
    """--store replaces recovery metrics and causes (a definition improved) of a run whose
    evidence verifies and whose re-check reproduces its stored verdict and counts; a run
    that does not, or whose evidence cannot be verified, is untouched."""
    from pgval.store.results import ResultsStore
    from tests.test_evidence_seal import stored_sealed_run

    run_dir, db, store, run_id = stored_one_event_run(tmp_path / "unsealed")
    res = CliRunner().invoke(main, ["recheck", str(run_dir), "--store"])
    assert res.exit_code == 2 and "needs a run id and --db" in " ".join(res.output.split())
    res = CliRunner().invoke(main, ["recheck", str(run_id), "--db", str(db), "--store"])
    assert res.exit_code == 3 and "cannot be verified" in " ".join(res.output.split())
    assert store.run(run_id)["downtime_s"] is None  # nothing written from unverified files

    run_dir, db, run_id = stored_sealed_run(tmp_path)
    store = ResultsStore(db)
    args = ["recheck", str(run_id), "--db", str(db), "--store", "--json"]
    stored = store.run(run_id)
    store.db["runs"].update(run_id, {"duplicate": stored["duplicate"] + 1})
    res = CliRunner().invoke(main, args)  # the stored counts differ from the evidence's
    assert res.exit_code == 3 and "does not reproduce its stored counts" in \
        " ".join(res.output.split())
    store.db["runs"].update(run_id, {"duplicate": stored["duplicate"], "downtime_s": 999.0})
    store.db["unprocessed_causes"].delete_where("run_id = ?", [run_id])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert store.run(run_id)["downtime_s"] != 999.0


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)),
                          st.one_of(st.none(), st.binary(max_size=40)),
                          st.integers(-2**63, 2**63 - 1), st.integers(0, 2**31 - 1),
                          st.integers(-2**63, 2**63 - 1)), max_size=60))
def test_a_topic_reads_back_from_evidence_exactly_as_it_was_read(
        tmp_path: Path, rows: list[tuple[bytes | None, bytes | None, int, int, int]]) -> None:
    """The delta encodings of offsets and times lose nothing, not even at the int64 ends
    where a delta overflows, nor a missing key or value."""
    records = TopicRecords(keys=[r[0] for r in rows], values=[r[1] for r in rows],
                           timestamps=[r[2] for r in rows], partitions=[r[3] for r in rows],
                           offsets=[r[4] for r in rows], topic=GET_TOPIC)
    path = save_topic(tmp_path, records)
    assert load_topic(tmp_path, GET_TOPIC).rows() == records.rows()
    if rows:
        meta = pq.ParquetFile(path).metadata.row_group(0)
        encodings = {meta.column(i).path_in_schema: meta.column(i).encodings
                     for i in range(meta.num_columns)}
        assert "DELTA_BINARY_PACKED" in encodings["offset"]
