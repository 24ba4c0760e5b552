"""Hypothesis strategies and converters shared by the oracle and validator tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from pgval.records.parse import InputEvents, OutputRecords, ResourceTable

RESOURCES = ["r0", "r1", "r2"]


@st.composite
def input_events(draw: st.DrawFn, max_size: int = 60) -> list[dict]:
    """Events with unique IDs, few resources and windows so keys collide often."""
    n = draw(st.integers(0, max_size))
    ids = draw(st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n, unique=True))
    events = []
    for i in ids:
        events.append({
            "id": i,
            "type": draw(st.sampled_from(["GET", "GET", "GET", "POST"])),
            "resource": draw(st.sampled_from(RESOURCES)),
            "event_ts": draw(st.integers(-50, 200)),
            "ingress_ts": draw(st.integers(0, 300)),
        })
    return events


def to_inputs(events: list[dict], resources: ResourceTable | None = None) -> InputEvents:
    rt = resources if resources is not None else ResourceTable()
    return InputEvents(
        id=np.array([e["id"] for e in events], dtype=np.int64),
        is_get=np.array([e["type"] == "GET" for e in events], dtype=bool),
        resource=np.array([rt.code(e["resource"]) for e in events], dtype=np.int32),
        event_ts=np.array([e["event_ts"] for e in events], dtype=np.int64),
        ingress_ts=np.array([e["ingress_ts"] for e in events], dtype=np.int64),
        resources=rt,
    )


def to_outputs(outputs: list[dict], resources: ResourceTable) -> OutputRecords:
    lengths = [len(o["ids"]) for o in outputs]
    offsets = np.zeros(len(outputs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = [i for o in outputs for i in o["ids"]]
    return OutputRecords(
        window_start=np.array([o["window_start"] for o in outputs], dtype=np.int64),
        window_end=np.array([o.get("window_end", -1) for o in outputs], dtype=np.int64),
        resource=np.array([resources.code(o["resource"]) for o in outputs], dtype=np.int32),
        count=np.array([o.get("count", -1) for o in outputs], dtype=np.int64),
        gets=np.array([o.get("gets", -1) for o in outputs], dtype=np.int64),
        posts=np.array([o.get("posts", -1) for o in outputs], dtype=np.int64),
        ingress_ts=np.array([o["ingress_ts"] for o in outputs], dtype=np.int64),
        position=np.arange(len(outputs), dtype=np.int64),
        ids=np.array(flat, dtype=np.int64),
        offsets=offsets,
        resources=resources,
    )


@st.composite
def produced_outputs(draw: st.DrawFn, expected_rows: list[dict]) -> list[dict]:
    """Mutate the expected outputs the way a faulty processor would."""
    outputs = []
    all_ids = [i for r in expected_rows for i in r["ids"]]
    for row in expected_rows:
        action = draw(st.sampled_from(["keep", "keep", "drop", "twice", "partial", "foreign"]))
        ingress = draw(st.integers(0, 400))
        base = {k: v for k, v in row.items() if k != "ids"}
        if action == "drop":
            continue
        ids = list(row["ids"])
        if action == "partial" and ids:
            ids = draw(st.lists(st.sampled_from(ids), max_size=len(ids)))
        if action == "foreign":
            ids = ids + draw(st.lists(st.one_of(st.sampled_from(all_ids or [7]),
                                                st.integers(-5, 5)), max_size=3))
        outputs.append({**base, "ids": ids, "ingress_ts": ingress})
        if action == "twice":
            outputs.append({**base, "ids": list(row["ids"]),
                            "ingress_ts": draw(st.integers(0, 400))})
    # Outputs at keys the oracle never produced.
    for _ in range(draw(st.integers(0, 2))):
        outputs.append({"window_start": draw(st.integers(-100, 300)),
                        "resource": draw(st.sampled_from([*RESOURCES, "zz"])),
                        "count": 1, "ids": draw(st.lists(st.sampled_from(all_ids or [3]),
                                                         max_size=3)),
                        "ingress_ts": draw(st.integers(0, 400))})
    return draw(st.permutations(outputs))
