"""Naive, obviously-correct reference implementations used as test oracles.

Written straight from docs/semantics.md and the paper's pseudo-code with dicts
and loops, no numpy, so the vectorised code can be checked against them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

Event = dict  # {"id","type","resource","event_ts","ingress_ts"}
Output = dict  # {"window_start","resource","ids","ingress_ts", ...}


def read_by(events: list[Event], topology: str) -> dict[int, Event]:
    """The events the topology reads (SST: GETs; MST: all), first ingress per ID.

    Duplicates are looked for among those only: a POST never hides a GET from SST.
    """
    seen: dict[int, Event] = {}
    for e in sorted(events, key=lambda e: e["ingress_ts"]):
        if topology == "sst" and e["type"] != "GET":
            continue
        seen.setdefault(e["id"], e)
    return seen


def ref_oracle(events: list[Event], topology: str, window_ms: int) -> dict[tuple[int, str], dict]:
    """Expected outputs keyed by (window_start, resource)."""
    groups: dict[tuple[int, str], list[Event]] = defaultdict(list)
    for e in read_by(events, topology).values():
        ws = (e["event_ts"] // window_ms) * window_ms
        groups[(ws, e["resource"])].append(e)
    result = {}
    for key, evs in groups.items():
        gets = sum(1 for e in evs if e["type"] == "GET")
        posts = len(evs) - gets
        if topology == "mst" and (gets == 0 or posts == 0):
            continue
        row = {"window_start": key[0], "window_end": key[0] + window_ms, "resource": key[1],
               "ids": sorted(e["id"] for e in evs)}
        if topology == "sst":
            row["count"] = gets
        else:
            row["gets"], row["posts"] = gets, posts
        result[key] = row
    return result


@dataclass
class RefResult:
    expected: int = 0
    processed: int = 0
    unprocessed: int = 0
    duplicate: int = 0
    incorrect: int = 0
    reliable: int = 0
    phases: dict = field(default_factory=dict)
    ids: dict = field(default_factory=dict)  # kind → sorted distinct IDs


def _phase(ts: int, phases: tuple[int, int, int] | None) -> str:
    if phases is None:
        return "control"
    start, t2, t3 = phases
    if ts < start:
        return "warmup"
    if ts < t2:
        return "control"
    if ts < t3:
        return "failure"
    return "recovery"


def ref_validate(events: list[Event], outputs: list[Output], topology: str, window_ms: int,
                 phases: tuple[int, int, int] | None = None) -> RefResult:
    """Algorithms 1 and 3 over outputs in stream order (ingress, then position)."""
    expected = ref_oracle(events, topology, window_ms)
    key_of: dict[int, tuple[int, str]] = {}
    for key, row in expected.items():
        for i in row["ids"]:
            key_of[i] = key
    first_ingress = {i: e["ingress_ts"] for i, e in read_by(events, topology).items()}
    names = ("control", "failure", "recovery")
    ph = {p: {"expected": 0, "processed": 0, "unprocessed": 0, "duplicate": 0,
              "incorrect": 0, "reliable": 0, "duplicated_ids": 0, "incorrect_ids": 0}
          for p in (*names, "warmup")}
    processed: set[int] = set()
    own_count: dict[int, int] = defaultdict(int)
    foreign: set[int] = set()
    res = RefResult()
    order = sorted(range(len(outputs)), key=lambda k: (outputs[k]["ingress_ts"], k))
    for k in order:
        out = outputs[k]
        p = _phase(out["ingress_ts"], phases)
        key = (out["window_start"], out["resource"])
        for i in out["ids"]:
            # Algorithm 1: "id in expected.list", and not before the input arrived
            if key_of.get(i) == key and out["ingress_ts"] >= first_ingress[i]:
                own_count[i] += 1
                if i in processed:
                    res.duplicate += 1
                    ph[p]["duplicate"] += 1
                else:
                    processed.add(i)
            else:
                res.incorrect += 1
                ph[p]["incorrect"] += 1
                foreign.add(i)
    for i in key_of:  # Algorithm 3
        p = _phase(first_ingress[i], phases)
        ph[p]["expected"] += 1
        res.expected += 1
        if i in processed:
            res.processed += 1
            ph[p]["processed"] += 1
        else:
            res.unprocessed += 1
            ph[p]["unprocessed"] += 1
        if own_count.get(i, 0) == 1 and i not in foreign:
            res.reliable += 1
            ph[p]["reliable"] += 1
        # The same ID's anomalies, on the input's clock (the row's reliability clock).
        ph[p]["duplicated_ids"] += own_count.get(i, 0) > 1
        ph[p]["incorrect_ids"] += i in foreign
    res.phases = {p: ph[p] for p in names}
    res.ids = {"unprocessed": sorted(i for i in key_of if i not in processed),
               "duplicate": sorted(i for i in key_of if own_count.get(i, 0) > 1),
               "incorrect": sorted(foreign)}
    return res
