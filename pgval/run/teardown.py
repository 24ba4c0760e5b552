"""The end of a run's machinery: the class archives the next run maps, then everything the
run started stopped (:class:`pgval.run.setup.Started`), whatever exists; what that did is
returned for run.json, never written into another object.

Run under :func:`pgval.host.signals.shielded`: a fault whose injection began and that was
not removed without error is removed (never restored: a crashed worker is not restarted just
to be stopped); a failed removal is logged as such.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.core.clock import now_ms
from pgval.deploy.shared_driver import SharedDrivers, SharedQuery
from pgval.host import cds, signals, undo
from pgval.run.setup import RunHandles, Started


@dataclass
class Teardown:
    """What stopping the run did: notes for run.json's config and the seconds it took."""

    notes: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


#: The class archives a run writes, in the order of what they save the next run (the
#: driver's start, the executors' priming, then the daemons'), for at most this long: a
#: machine's first run pays a part (a dump is ~6 s per 100 MB here), the next runs the rest.
DUMP_ORDER = ("spark-driver", "spark-executor", "kafka-broker", "spark-master",
              "spark-worker")
DUMP_BUDGET_S = 8.0


def dump_class_archives(started: Started | RunHandles) -> Teardown:
    """The first runs of a kind of JVM on this machine leave its class archive for the next
    (:mod:`pgval.host.cds`): after the read-back, so nothing measured waits for it, within
    :data:`DUMP_BUDGET_S`. A failed dump costs the next run its speed-up, never this run
    its result."""
    out = Teardown()
    t0 = time.monotonic()
    try:
        wanted = started.deployment.class_dumps()
        own = started.driver.class_dump() if started.driver is not None else None
        if own is not None:
            wanted.insert(0, own)
        wanted.sort(key=lambda w: DUMP_ORDER.index(w[0].kind) if w[0].kind in DUMP_ORDER
                    else len(DUMP_ORDER))
        if wanted:
            out.notes["class_archives"] = cds.dump_all(wanted, budget_s=DUMP_BUDGET_S,
                                                       stop=signals.pending)
            out.timings["class_dump_s"] = time.monotonic() - t0
    except Exception as exc:
        out.notes["class_archives"] = {"error": str(exc)}
    return out


def teardown(started: Started, keep_topics: bool) -> Teardown:
    """Remove the fault, stop generators and driver, delete the run's topics on a cluster
    that stays up, stop the deployment if the run started it — whatever exists."""
    out = Teardown()
    if started.schedule.needs_removal():
        with contextlib.suppress(Exception):
            started.schedule.step("remove", now_ms(), restore=False)
    if started.monitor is not None:
        with contextlib.suppress(Exception):
            started.monitor.close()
    if started.generators is not None:
        with contextlib.suppress(Exception):
            started.generators.close()
    if started.driver is not None:
        t0 = time.monotonic()
        with contextlib.suppress(Exception):
            started.driver.stop()
            undo.done(started.run_dir, "driver")
        out.timings["driver_stop_s"] = time.monotonic() - t0
        early = getattr(started.driver, "stop_s", None)
        if early is not None:  # begun beside the read-back: driver_stop_s is what was left
            out.timings["driver_stop_overlapped_s"] = early
        if isinstance(started.driver, SharedQuery):  # with the seconds of its steps
            out.notes["driver"] = started.driver.describe()
    # The run's topics go with a cluster this run stops; on one that stays up (warm,
    # attached, compose, external) they are deleted unless --keep-topics.
    stays_up = not (started.owns_deployment and started.deployment.owns_cluster)
    if started.topics is not None and stays_up:
        try:
            out.notes["topics_deleted"] = started.deployment.close_run(started.topics,
                                                                       keep=keep_topics)
        except Exception as exc:
            out.notes["topics_deleted_error"] = str(exc)
    if started.owns_deployment:
        t0 = time.monotonic()
        with contextlib.suppress(Exception):
            started.deployment.stop()
        out.timings["cluster_stop_s"] = time.monotonic() - t0
    if started.guard is not None:
        # Kept (with its reaper) while a recorded process runs or an undo is pending: the
        # reaper then finishes the job once this pgval exits.
        with contextlib.suppress(Exception):
            started.guard.stop()
    return out


def remove_run_data(run_dir: Path, checkpoint: bool = True) -> None:
    """Delete the machinery of a stored run (broker data, checkpoints, a file or user sink's
    folder, executors' jar copies), keeping its evidence (a sink's rows among it) and the
    process logs: 50-130 MB per run otherwise."""
    run_dir = Path(run_dir)
    for data in (run_dir / "kafka").glob("broker-*/data"):
        shutil.rmtree(data, ignore_errors=True)
    # The stopped cluster's credentials (0600, but dead weight that a copy of the run
    # directory would carry along): the Kafka login and the Spark secret.
    for secret in (run_dir / "kafka" / "client.properties", run_dir / "spark" / "auth-secret",
                   *(run_dir / "kafka").glob("broker-*/server.properties")):
        with contextlib.suppress(OSError):
            secret.unlink()
    if checkpoint:
        shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)
    shutil.rmtree(run_dir / "sink", ignore_errors=True)  # a file or user sink: rows kept
    for jar in (run_dir / "spark" / "work").rglob("*.jar"):
        with contextlib.suppress(OSError):
            jar.unlink()


def remove_stored_run_data(started: Started, drivers: SharedDrivers | None) -> None:
    """:func:`remove_run_data`; a shared driver's query's checkpoint a while later
    (:meth:`SharedDrivers.retire`: its state stores may still write into it)."""
    shared = isinstance(started.driver, SharedQuery)
    remove_run_data(started.run_dir, checkpoint=not shared)
    if shared and drivers is not None:
        drivers.retire(started.run_dir / "checkpoint")
