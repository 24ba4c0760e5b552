"""The vectorised validator against the loop-by-loop reference of Algorithms 1 and 3."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.checker.validator import ANOMALIES, guarantee_of, validate
from pgval.oracle import expected_outputs
from pgval.phases import CONTROL, FAILURE, PHASES, RECOVERY, Phases
from pgval.records import ResourceTable
from tests.reference import ref_oracle, ref_validate
from tests.strategies import input_events, produced_outputs, to_inputs, to_outputs
from tests.test_oracle_properties import colliding_events


@st.composite
def scenario(draw: st.DrawFn):
    events = draw(st.one_of(input_events(), colliding_events()))
    topology = draw(st.sampled_from(["sst", "mst"]))
    w = draw(st.sampled_from([7, 10, 50]))
    rows = list(ref_oracle(events, topology, w).values())
    outputs = draw(produced_outputs(rows))
    bounds = sorted(draw(st.lists(st.integers(0, 400), min_size=3, max_size=3)))
    phases = tuple(bounds) if draw(st.booleans()) else None
    return events, outputs, topology, w, phases


@settings(max_examples=300)
@given(scenario())
def test_matches_reference(sc) -> None:
    events, outputs, topology, w, phases = sc
    inputs = to_inputs(events)
    exp = expected_outputs(inputs, topology, w)
    got = validate(exp, to_outputs(outputs, inputs.resources),
                   Phases(*phases) if phases else None)
    ref = ref_validate(events, outputs, topology, w, phases)
    assert (got.expected, got.processed, got.unprocessed, got.duplicate, got.incorrect,
            got.reliable) == (ref.expected, ref.processed, ref.unprocessed, ref.duplicate,
                              ref.incorrect, ref.reliable)
    assert {p: c.as_dict() for p, c in got.phases.items()} == ref.phases
    for kind in ANOMALIES:
        assert got.ids(kind).tolist() == ref.ids[kind], kind


@given(scenario())
def test_accounting_identities(sc) -> None:
    events, outputs, topology, w, phases = sc
    inputs = to_inputs(events)
    exp = expected_outputs(inputs, topology, w)
    v = validate(exp, to_outputs(outputs, inputs.resources), Phases(*phases) if phases else None)
    occurrences = sum(len(o["ids"]) for o in outputs)
    assert v.processed + v.unprocessed == v.expected
    assert v.processed + v.duplicate + v.incorrect == occurrences
    assert 0 <= v.reliable <= v.processed
    assert sum(c.duplicate for c in v.phases.values()) <= v.duplicate
    if v.expected:
        assert 0.0 <= v.reliability <= 1.0
    else:
        assert v.reliability is None and v.guarantee == "unknown"
    assert len(v.ids("unprocessed")) == v.unprocessed
    assert len(v.ids("duplicate")) == v.duplicated_ids <= v.duplicate
    assert len(v.ids("incorrect")) <= v.incorrect


@settings(max_examples=200)
@given(scenario())
def test_phase_rows_add_up_on_the_inputs_clock(sc) -> None:
    """Per phase, reliability and the ID-level anomalies are about the same expected IDs."""
    events, outputs, topology, w, phases = sc
    inputs = to_inputs(events)
    exp = expected_outputs(inputs, topology, w)
    ph = Phases(*phases) if phases else Phases.unbounded()
    v = validate(exp, to_outputs(outputs, inputs.resources), ph)
    in_phase = ph.of(exp.id_ingress)
    anomalous = {k: np.isin(exp.id_sorted, v.ids(k)) for k in ANOMALIES}
    for name, code in zip(PHASES, (CONTROL, FAILURE, RECOVERY), strict=True):
        c = v.phases[name]
        mine = in_phase == code
        not_reliable = mine & (anomalous["unprocessed"] | anomalous["duplicate"]
                               | anomalous["incorrect"])
        assert c.reliable + int(not_reliable.sum()) == c.expected
        assert c.duplicated_ids == int((mine & anomalous["duplicate"]).sum())
        assert c.incorrect_ids == int((mine & anomalous["incorrect"]).sum())
        assert c.unprocessed == int((mine & anomalous["unprocessed"]).sum())
        assert c.reliability is None if c.expected == 0 else c.reliability == (
            c.reliable / c.expected)
    assert sum(c.duplicated_ids for c in v.phases.values()) <= v.duplicate
    assert sum(c.duplicated_ids for c in v.phases.values()) <= v.duplicated_ids
    assert sum(c.incorrect_ids for c in v.phases.values()) <= v.incorrect


@given(scenario())
def test_without_phases_control_is_the_whole_run(sc) -> None:
    events, outputs, topology, w, _ = sc
    inputs = to_inputs(events)
    v = validate(expected_outputs(inputs, topology, w), to_outputs(outputs, inputs.resources))
    assert v.phases["control"].as_dict() == {
        "expected": v.expected, "processed": v.processed, "unprocessed": v.unprocessed,
        "duplicate": v.duplicate, "incorrect": v.incorrect, "reliable": v.reliable,
        "duplicated_ids": v.duplicated_ids, "incorrect_ids": v.incorrect_ids}
    assert v.phases["control"].reliability == v.reliability
    assert not any(any(v.phases[p].as_dict().values()) for p in ("failure", "recovery"))


@given(input_events(), st.sampled_from(["sst", "mst"]), st.integers(0, 3))
def test_faithful_processor_is_exactly_once(events: list[dict], topology: str, seed: int
                                            ) -> None:
    rows = ref_oracle(events, topology, 10).values()
    outputs = [{**r, "ingress_ts": 500 + seed} for r in rows]
    inputs = to_inputs(events)
    v = validate(expected_outputs(inputs, topology, 10), to_outputs(outputs, inputs.resources))
    assert v.correctness == 1.0 and v.missing_outputs == 0
    if not rows:  # nothing expected: no evidence either way
        assert v.guarantee == "unknown" and v.reliability is None
    else:
        assert v.guarantee == "exactly-once" and v.reliability == 1.0


def test_nothing_expected_is_unknown_not_exactly_once() -> None:
    rt = ResourceTable()
    posts_only = to_inputs([{"id": 1, "type": "POST", "resource": "r0", "event_ts": 0,
                             "ingress_ts": 0}], rt)
    for inputs, topology in ((to_inputs([], rt), "sst"), (posts_only, "sst"),
                             (posts_only, "mst")):
        v = validate(expected_outputs(inputs, topology, 10), to_outputs([], rt),
                     Phases(0, 10, 20))
        assert v.expected == 0
        assert v.reliability is None and v.guarantee == "unknown"
        assert all(c.reliability is None for c in v.phases.values())
        assert v.ids("unprocessed").tolist() == []


def test_guarantee_ladder() -> None:
    assert guarantee_of(0, 0, 0, 0) == "exactly-once"
    assert guarantee_of(0, 3, 0, 0) == "at-least-once"
    assert guarantee_of(2, 0, 0, 0) == "at-most-once"
    assert guarantee_of(2, 3, 0, 0) == "none"
    assert guarantee_of(0, 0, 1, 0) == "none"
    assert guarantee_of(0, 0, 0, 1) == "none"
