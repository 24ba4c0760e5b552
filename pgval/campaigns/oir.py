"""Optimum ingestion rate (Karimov et al., used by the paper): the highest generator
rate at which a control run keeps 100 % reliability and stable latency.

The search doubles the rate from ``start`` while trials pass, halves it while they fail,
then bisects between the highest pass and the lowest failure until the two bracket the
OIR within ``precision`` (the bracket's width over its top), at most ``max_trials``
control-only runs (:func:`next_rate`, a pure function of the trials so far). The result
says whether it bracketed, or only found a lower bound (no failure up to ``max_rate`` or
the budget ran out) or an upper one; it is stored per machine and run shape (the
cluster's size and the query's knobs, :meth:`pgval.core.shape.RunShape.oir`), since an OIR is
a property of the machine and the cluster as much as of the job. A trial passes when

* reliability is 100 % (no unprocessed, duplicate or incorrect ID),
* the generator achieved ≥ 95 % of the asked rate (else the generator, not
  Spark, is the limit — reported as such), and
* latency is stable: the median paper latency of the last third of the run is
  at most ``growth`` × the first third's + one trigger interval (a queue that
  grows makes latency climb through the run).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pgval.campaigns.matrix import prepared_experiment
from pgval.config import resolve
from pgval.core.errors import UserMistake
from pgval.core.schema import Fault, Guarantee
from pgval.core.spec import RunSpec
from pgval.deploy.warm import WarmDeployments
from pgval.run.experiment import ExperimentResult
from pgval.store.results import ResultsStore

GROWTH = 1.5
#: Below this rate a search that keeps failing stops (the job, not the rate, is broken).
MIN_RATE = 10.0


def shape_matches(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether an OIR stored with ``stored`` holds for ``wanted``. A field the stored shape
    lacks was not recorded then (a field added later) and is not held against it."""
    return not _differing(stored, wanted)


def shape_difference(stored: dict[str, Any], wanted: dict[str, Any]) -> str:
    """``"workers 2 (this run: 3), …"``: how a stored OIR's shape differs from a run's."""
    return ", ".join(f"{k} {stored[k]} (this run: {wanted.get(k)})"
                     for k in _differing(stored, wanted))


def _differing(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(stored) & set(wanted) if stored[k] != wanted[k])


def machine_id() -> str:
    """What an OIR was measured on: host name and core count."""
    return f"{socket.gethostname()} ({os.cpu_count() or 0} cores)"


@dataclass
class Trial:
    rate: float
    passed: bool
    reason: str
    reliability: float
    achieved_rate: float
    latency_first_s: float | None
    latency_last_s: float | None
    run_id: int | None


@dataclass
class OirResult:
    topology: str
    pg: str
    #: The highest passing rate below the lowest failure (the OIR's lower bound), if any.
    oir: float | None
    trials: list[Trial] = field(default_factory=list)
    #: The lowest failing rate (the OIR's upper bound), if any.
    upper: float | None = None
    precision: float = 0.1
    machine: str = field(default_factory=machine_id)
    #: The OIR shape of the search's base config (None: any shape, as before 2026-11).
    shape: dict[str, Any] | None = None

    @property
    def bracketed(self) -> bool:
        return (self.oir is not None and self.upper is not None
                and (self.upper - self.oir) / self.upper <= self.precision)

    def describe(self) -> str:
        if self.oir is None:
            low = min((t.rate for t in self.trials), default=0.0)
            return f"below {low:,.0f} events/s (every rate tried failed)"
        if self.upper is None:
            return (f"at least {self.oir:,.0f} events/s (no rate tried failed; the highest "
                    "passed)")
        width = (self.upper - self.oir) / self.upper
        within = ("within" if self.bracketed else "not yet within")
        return (f"{self.oir:,.0f} events/s: {self.oir:,.0f} passed, {self.upper:,.0f} failed "
                f"({width:.0%} apart, {within} the {self.precision:.0%} asked)")


def bracket(trials: list[Trial]) -> tuple[float | None, float | None]:
    """(highest pass below the lowest failure, lowest failure). A pass above a failure
    (noise) does not move the bracket up: the lowest failure bounds the OIR."""
    fails = [t.rate for t in trials if not t.passed]
    hi = min(fails) if fails else None
    passes = [t.rate for t in trials if t.passed and (hi is None or t.rate < hi)]
    return (max(passes) if passes else None), hi


def next_rate(trials: list[Trial], start: float, max_rate: float,
              precision: float) -> float | None:
    """The next trial's rate, or None when the search is done: bracketed within
    ``precision``, no failure up to ``max_rate``, or failing below :data:`MIN_RATE`."""
    if not trials:
        return start
    lo, hi = bracket(trials)
    if hi is None:  # double, and try max_rate itself before stopping there
        assert lo is not None
        return min(lo * 2, max_rate) if lo < max_rate else None
    if lo is None:
        return hi / 2 if hi / 2 >= MIN_RATE else None
    if (hi - lo) / hi <= precision:
        return None
    return (lo + hi) / 2


def judge(result: ExperimentResult, rate: float, trigger_ms: int,
          growth: float = GROWTH) -> Trial:
    """Pass/fail of one control run at ``rate``, with the reason."""
    v = result.evaluation.validation
    m = result.evaluation.metrics
    achieved = float(result.generator.get("achieved_rate") or 0.0)
    lat = m.latency_per_output_ms
    ts = m.output_ingress_ms
    ok = ~np.isnan(lat)
    first = last = None
    if ok.sum() >= 3:
        lat, ts = lat[ok], ts[ok]
        a, b = np.percentile(ts, [33.3, 66.7])
        if (ts <= a).any() and (ts >= b).any():
            first = float(np.median(lat[ts <= a])) / 1000
            last = float(np.median(lat[ts >= b])) / 1000
    reasons = []
    if not result.validity.valid:  # a trial that proved nothing cannot pass
        reasons.append("run unknown: " + "; ".join(result.validity.texts))
    if v.reliability is None or v.reliability < 1.0 or v.guarantee != "exactly-once":
        rel = "n/a" if v.reliability is None else f"{v.reliability:.4%}"
        reasons.append(f"reliability {rel} ({v.guarantee})")
    if achieved < 0.95 * rate:
        reasons.append(f"generator reached only {achieved:,.0f} ev/s")
    if first is None or last is None:
        reasons.append("too few outputs to judge latency")
    elif last > growth * first + trigger_ms / 1000:
        reasons.append(f"latency grew from {first:.2f} s to {last:.2f} s")
    return Trial(rate=rate, passed=not reasons, reason="; ".join(reasons) or "stable",
                 reliability=v.reliability, achieved_rate=achieved, latency_first_s=first,
                 latency_last_s=last, run_id=result.run_id)


def trial_config(base: RunSpec, rate: float) -> RunSpec:
    """A trial: ``base`` at ``rate`` without a fault (its own cluster config)."""
    return resolve(base, rate=rate, fault=Fault.NONE)


def search_oir(base: RunSpec, db: Path, runs_root: Path, start: float = 1000.0,
               max_rate: float = 200_000.0, max_trials: int = 6, precision: float = 0.1,
               on_trial: Callable[[Trial], None] | None = None,
               shared_driver: bool = False) -> OirResult:
    """Doubling, halving, then bisection over control-only runs; stores the result. With
    ``shared_driver`` the trials share one driver (pgval.deploy.shared_driver); the stored
    shape records it (``driver``), and does not hold it against a run that looks the OIR
    up: a trial is judged after its warm-up, where a warm and a fresh driver meet."""
    with WarmDeployments(Path(runs_root), label=f"oir-cluster-{os.getpid()}",
                         shared_driver=shared_driver) as warm:
        res = _search(base, db, Path(runs_root), start, max_rate, max_trials, precision,
                      on_trial, warm)
    save_oir(db, res)
    return res


def _search(base: RunSpec, db: Path, runs_root: Path, start: float, max_rate: float,
            max_trials: int, precision: float, on_trial: Callable[[Trial], None] | None,
            warm: WarmDeployments) -> OirResult:
    """The trials, all on one warm cluster."""
    shape = base.shape().oir()
    if warm.drivers is not None:
        shape["driver"] = "shared"
    res = OirResult(base.topology, base.pg, None, precision=precision, shape=shape)
    store = ResultsStore(db)
    while len(res.trials) < max_trials:
        rate = next_rate(res.trials, start, max_rate, precision)
        if rate is None:
            break
        cfg = trial_config(base, rate)
        run_id = store.start_run("validate", cfg.topology, cfg.window_ms, pg=cfg.pg,
                                 fault=cfg.fault, seed=cfg.seed,
                                 params={**cfg.to_record(), "oir_trial": True})
        run_dir = runs_root / f"oir-{base.topology}-{base.pg}-{int(rate)}-run{run_id}"
        result = prepared_experiment(store, run_id, cfg, db, run_dir,
                                     extra_params={"oir_trial": True},
                                     deployment=warm.for_run(cfg),
                                     drivers=warm.drivers).run()
        trial = judge(result, rate, base.trigger_ms)
        res.trials.append(trial)
        if on_trial:
            on_trial(trial)
    res.oir, res.upper = bracket(res.trials)
    return res


def save_oir(db: Path, res: OirResult) -> None:
    with ResultsStore(db) as store, store.transaction():
        store.db["oir"].insert({
            "topology": res.topology, "pg": res.pg, "rate": res.oir,
            "measured_at": time.time(),
            "trials": json.dumps([dataclasses.asdict(t) for t in res.trials], default=str),
            "upper": res.upper, "precision": res.precision, "bracketed": int(res.bracketed),
            "machine": res.machine,
            "shape": None if res.shape is None else json.dumps(res.shape, sort_keys=True),
        })


@dataclass(frozen=True)
class StoredOir:
    rate: float  # the highest passing rate: what runs "at the OIR" use
    upper: float | None  # the lowest failing rate, if the search found one
    bracketed: bool  # the two within the search's precision
    measured_as: str | None = None  # the pg whose OIR stands in (OIR_STAND_INS)
    shape: dict[str, Any] | None = None  # what it was measured with (None: not recorded)

    def describe(self) -> str:
        if self.bracketed and self.upper is not None:
            text = f"{self.rate:,.0f} events/s (passed; {self.upper:,.0f} failed)"
        else:
            text = (f"{self.rate:,.0f} events/s, a lower bound only (the search stopped "
                    "before bracketing the OIR)")
        if self.measured_as:
            text += f", measured as {self.measured_as}"
        return text


#: A pg whose fault-free run is another's: an OIR trial has no fault, and m1 without a
#: restart is a1's query and sink started from the latest offsets, so what it sustains is
#: a1's. Used only when no OIR was measured for the pg itself.
OIR_STAND_INS: dict[Guarantee, tuple[Guarantee, str]] = {
    Guarantee.M1: (Guarantee.A1, "without a restart m1 is a1's query and sink"),
}


def stored_oir(db: Path, topology: str, pg: str, machine: str | None = None,
               shape: dict[str, Any] | None = None) -> StoredOir | None:
    """The latest OIR measured for (topology, pg) on ``machine`` (default: this one; rows
    from before machines were recorded count for any) with run shape ``shape`` (default:
    any; rows from before shapes were recorded count for any), or its stand-in's
    (:data:`OIR_STAND_INS`), or None."""
    own = _newest(_stored(db, topology, pg, machine), shape)
    if own is None and pg in OIR_STAND_INS:
        stand_in, why = OIR_STAND_INS[pg]
        other = _newest(_stored(db, topology, stand_in, machine), shape)
        if other is not None:
            return dataclasses.replace(other, measured_as=f"{stand_in}: {why}")
    return own


def stored_elsewhere(db: Path, topology: str, pg: str, shape: dict[str, Any],
                     machine: str | None = None) -> str | None:
    """When no OIR of ``shape`` is stored but one of another shape is: how the newest such
    differs (for the error that asks for a search with the run's own options)."""
    pgs = (pg, *(OIR_STAND_INS[pg][:1] if pg in OIR_STAND_INS else ()))
    for p in pgs:
        for row in _stored(db, topology, p, machine):
            if row.shape is not None and not shape_matches(row.shape, shape):
                return shape_difference(row.shape, shape)
    return None


def _newest(rows: list[StoredOir], shape: dict[str, Any] | None) -> StoredOir | None:
    return next((r for r in rows
                 if shape is None or r.shape is None or shape_matches(r.shape, shape)), None)


def _stored(db: Path, topology: str, pg: str, machine: str | None) -> list[StoredOir]:
    """Every OIR stored for (topology, pg) on ``machine``, newest first."""
    if not Path(db).exists():
        return []
    with ResultsStore(db) as store:
        rows: list[dict[str, Any]] = list(store.db.query(
            "select rate, upper, bracketed, shape from oir where topology = ? and pg = ? and "
            "rate is not null and (machine = ? or machine is null) order by measured_at desc",
            [topology, pg, machine or machine_id()]))
    return [StoredOir(float(r["rate"]), None if r["upper"] is None else float(r["upper"]),
                      bool(r["bracketed"]), shape=json.loads(r["shape"]) if r["shape"] else None)
            for r in rows]


class OirNotStored(UserMistake, LookupError):
    """No OIR is stored for a run's topology, pg and shape (``--rate oir`` asked for one);
    the message (one sentence) says how to measure it. A ``LookupError`` too."""


def oir_for(db: Path, cfg: RunSpec) -> StoredOir:
    """The OIR stored for ``cfg``'s topology, pg and run shape on this machine (what
    ``--rate oir`` runs at), or :class:`OirNotStored`."""
    topology, pg, shape = cfg.topology, cfg.pg, cfg.shape().oir()
    stored = stored_oir(db, topology, pg, shape=shape)
    if stored is not None:
        return stored
    how = (f"run `pgval oir --topology {topology} --pg {pg} --db {db}` with this run's "
           "cluster and query options first")
    if differs := stored_elsewhere(db, topology, pg, shape):
        raise OirNotStored(f"the optimum ingestion rate stored for {topology} {pg} in {db} "
                           f"was measured with another run shape: {differs}; {how}")
    raise OirNotStored(f"no optimum ingestion rate is stored for {topology} {pg} on this "
                       f"machine ({machine_id()}) in {db}; {how}")
