"""What makes two runs the same experiment: :class:`RunShape`, one definition for the three
places that compare runs.

* a **matrix** resumes the cells of the same grid: its key hashes every setting but the
  grid axes and the seed (:meth:`RunShape.key`);
* an **OIR** holds for one machine and cluster: what can change the rate a query
  sustains (:meth:`RunShape.oir`);
* the **report** averages repetitions only: never runs of another rate, phase length,
  window, crash point or deployment (:data:`REPORTED`).

A shape is made from a configuration as a record (an ``RunSpec`` as a dict, or
a stored run's ``params``), so the report, which reads stored runs of any pgval version,
and the campaigns, which hold live configs, use the same fields. Foundation layer: the
report imports it, and it must not import the config.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pgval.core.redact import ALL_VALUES, REDACTED, digest_values, redact_record
from pgval.core.schema import (
    CrashPoint,
    Deploy,
    Fault,
    FaultSpec,
    Guarantee,
    Name,
    Restart,
    Topology,
)

#: The grid's axes: a cell's own, not shared by the runs of one matrix.
AXES: Final = ("topology", "pg", "fault", "crash_point")
#: Differs between repetitions of one experiment (repetition r runs with seed + r).
REPETITION: Final = ("seed",)
#: What an OIR depends on besides machine, topology and pg: the query's knobs and where it
#: runs (an external or attached cluster is named by its addresses or directory, as its
#: size is not pgval's to know) and the embedded cluster's size (``cluster``'s fields).
#: The phase length is not among them: it changes how long a trial is judged, not the rate.
OIR_FIELDS: Final = ("deploy", "bootstrap", "master", "running_cluster", "window_ms",
                     "watermark_ms", "trigger_ms", "shuffle_partitions",
                     "max_offsets_per_trigger", "executor_memory", "spark_conf", "resources",
                     "get_share", "producers")
OIR_CLUSTER_FIELDS: Final = ("brokers", "partitions", "workers", "cores_per_worker",
                             "worker_memory", "broker_heap")
#: What sets a report's groups apart within one topology × pg × fault: a run at 2k ev/s
#: is no repetition of one at 60k, a driver restarted at once none of one restarted at T3,
#: one user's job none of another's, a broker crash of the coordinator none of the
#: leader's (an explicit ``--target``), one partitioned link or schedule none of another.
REPORTED: Final = ("rate", "phase_seconds", "window_ms", "crash_point", "deploy", "restart",
                   "restart_delay_s", "job", "sink", "target", "partition", "schedule")
#: What a setting missing from an older run's params meant then: runs before restart
#: policies restarted a crashed worker or driver at T3, with no delay.
DEFAULTS: Final[Mapping[str, Any]] = {"deploy": Deploy.LOCAL, "crash_point": CrashPoint.TIMED,
                                      "restart": Restart.AT_REMOVE, "restart_delay_s": 0.0,
                                      "sink": "kafka"}
#: Settings added after grids were stored, with the value that means "as before": left out
#: of a shape while they have it, so a matrix stored before them keeps its key (and
#: resumes), and a run that sets one is another shape.
UNSET_OMITTED: Final[Mapping[str, Any]] = {
    "job": None, "sink": "kafka", "partition": None, "schedule": None, "schedule_file": None,
    "schedule_origin": None, "fault_count": 2, "loss_share": None,
    "replay": {}, "input_makers": {}, "event_time_field": None, "skew": {}, "disorder": None,
    "late": None, "inputs_spec": None, "trigger": None, "avro_schema": {},
    "checker": "auto", "spark_above": None, "spark_master": None}
#: Settings that mean something only for a fault that restarts a process: None for others.
RESTART_FIELDS: Final = ("restart", "restart_delay_s")
#: The faults whose process came back (at T3) before restart policies were stored: a run
#: stored since names the policy it applied, None where nothing restarted.
LEGACY_RESTARTING: Final = frozenset({"crash", "driver-crash"})


@dataclass(frozen=True)
class RunShape:
    """A run's cell (topology, pg, fault at its crash point) and every other setting but
    its seed, as stored: secret values redacted, the user's Kafka and Spark values as
    short hashes (two shapes still differ when a value does,
    :func:`pgval.core.redact.digest_values`).

    The names are :mod:`pgval.core.schema` members; a stored row naming one this pgval does not
    know (an older or damaged database) keeps its text, so a report still shows it."""

    topology: str | None
    pg: str | None
    fault: str | None
    crash_point: str
    #: Every other setting (seed excluded) as canonical JSON: hashable, and the matrix key
    #: is its hash.
    settings: str = "{}"

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> RunShape:
        """The shape of a configuration given as a record: ``dataclasses.asdict`` of an
        ``RunSpec``, or a stored run's params. A stored record's user values are
        already ``<redacted>`` and stay so: compare shapes from one source."""
        record = redact_record(dict(config))
        for name in ALL_VALUES:
            values = config.get(name)
            if isinstance(values, Mapping) and REDACTED not in values.values():
                record[name] = digest_values(values)
        settings = {k: v for k, v in record.items() if k not in (*AXES, *REPETITION)
                    and not (k in UNSET_OMITTED and v == UNSET_OMITTED[k])}
        return cls(topology=_name(Topology, config.get("topology")),
                   pg=_name(Guarantee, config.get("pg")),
                   fault=_name(Fault, config.get("fault")),
                   crash_point=_name(CrashPoint, config.get("crash_point"))
                   or DEFAULTS["crash_point"],
                   settings=json.dumps(settings, sort_keys=True, default=str))

    @functools.cached_property
    def values(self) -> dict[str, Any]:
        """The settings as a dict (a copy: changing it changes no shape)."""
        loaded = json.loads(self.settings)
        return loaded if isinstance(loaded, dict) else {}

    def value(self, name: str) -> Any:
        """One setting, the crash point included; what it meant when missing (older runs)."""
        if name == "crash_point":
            return self.crash_point
        if name in RESTART_FIELDS and not self.restarts:
            return None
        found = self.values.get(name)
        return DEFAULTS.get(name) if found is None else found

    @property
    def restarts(self) -> bool:
        """Whether the run's fault restarted a process: the restart policy it stored (None:
        nothing restarted), or, for a run stored before policies, its fault's name."""
        if "restart" in self.values:
            return self.values["restart"] is not None
        return self.fault in LEGACY_RESTARTING

    @property
    def fault_spec(self) -> FaultSpec:
        """The fault at its crash point (for a shape of a known fault)."""
        return FaultSpec(Fault.parse(self.fault), CrashPoint.parse(self.crash_point))

    def key(self, rate: str | None = None) -> str:
        """The matrix key: the settings' hash, the same for every cell and repetition of one
        grid. ``rate`` replaces the rate (``"oir x 0.5"``: with ``--rate oir`` the rate is
        looked up per cell, the fraction is what the matrix shares). The format is stored
        (``runs.params.matrix_key``): changing it would make every stored matrix restart."""
        settings = self.settings
        if rate is not None:
            settings = json.dumps({**self.values, "rate": rate}, sort_keys=True)
        return hashlib.sha256(settings.encode()).hexdigest()[:12]

    def oir(self) -> dict[str, Any]:
        """The run shape an OIR holds for (:data:`OIR_FIELDS`), with effective values: no
        ``--shuffle-partitions`` means one per Kafka partition. Stored in the ``oir`` table."""
        cluster = self.values.get("cluster") or {}
        shape = {**{f: self.values.get(f) for f in OIR_FIELDS},
                 **{f: cluster.get(f) for f in OIR_CLUSTER_FIELDS}}
        shape["shuffle_partitions"] = shape["shuffle_partitions"] or cluster.get("partitions")
        shape["spark_conf"] = shape["spark_conf"] or {}
        return shape


def _name(cls: type[Name], value: object) -> str | None:
    """The member named ``value``; text this pgval does not know kept as it is."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    try:
        return cls(value)
    except (ValueError, TypeError):  # TypeError: a damaged row's list or dict
        return value if isinstance(value, str) else str(value)
