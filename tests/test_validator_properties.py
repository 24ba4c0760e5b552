"""The vectorised validator against the loop-by-loop reference of Algorithms 1 and 3."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.oracle import expected_outputs
from pgval.phases import Phases
from pgval.validator import guarantee_of, validate
from tests.reference import ref_oracle, ref_validate
from tests.strategies import input_events, produced_outputs, to_inputs, to_outputs


@st.composite
def scenario(draw: st.DrawFn):
    events = draw(input_events())
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
    assert 0.0 <= v.reliability <= 1.0


@given(input_events(), st.sampled_from(["sst", "mst"]), st.integers(0, 3))
def test_faithful_processor_is_exactly_once(events: list[dict], topology: str, seed: int
                                            ) -> None:
    rows = ref_oracle(events, topology, 10).values()
    outputs = [{**r, "ingress_ts": 500 + seed} for r in rows]
    inputs = to_inputs(events)
    v = validate(expected_outputs(inputs, topology, 10), to_outputs(outputs, inputs.resources))
    assert v.guarantee == "exactly-once"
    assert v.reliability == 1.0 and v.correctness == 1.0 and v.missing_outputs == 0


def test_guarantee_ladder() -> None:
    assert guarantee_of(0, 0, 0, 0) == "exactly-once"
    assert guarantee_of(0, 3, 0, 0) == "at-least-once"
    assert guarantee_of(2, 0, 0, 0) == "at-most-once"
    assert guarantee_of(2, 3, 0, 0) == "none"
    assert guarantee_of(0, 0, 1, 0) == "none"
    assert guarantee_of(0, 0, 0, 1) == "none"
