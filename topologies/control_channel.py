"""The driver's control channel: pgval asks the running driver to act; the answer goes to
the progress file, the one record pgval already reads.

Why a channel at all: on a cluster pgval does not own (standalone, YARN, Kubernetes) it
cannot SIGKILL an executor's process, but the driver can ask Spark's scheduler to kill
one through the cluster manager (see docs/faults.md, "Executor kill on any cluster
manager"). The driver runs in client mode on pgval's machine, so files are enough:

* pgval writes ``<control-dir>/req-<n>.json`` atomically (temp file, then rename):
  ``{"request": n, "nonce": "...", "deadline_ms": ..., "action": "...", ...}``;
* a daemon thread of the driver (:class:`ControlLoop`) looks about 4 times a second, reads
  and deletes each request, acts, and appends ``{"event": "control", "request": n,
  "nonce": ..., "action": ..., "ok": true|false, ...}`` to the progress file (``error``
  says why when ``ok`` is false). An unknown or malformed request is answered with an
  error; an expired one (past ``deadline_ms``: the asker gave up) is answered, not done.
  Nothing a request does can stop the query: every failure becomes an answer;
* every ~0.5 s the same thread reads the executors Spark's scheduler has registered and,
  when the set changed, appends ``{"event": "executors", "ts": ms, "ids": [...],
  "added": [...], "removed": [...], "hosts": {id: "host:port"}}`` (``hosts`` of the added
  ones, when Spark's status store knows them yet). The first line lists every executor
  as added.

Actions: ``ping`` (answers ``ok``), ``executors`` (the current ids), ``kill-executor``
(``executor``: an id, or null to choose one by ``seed`` from the sorted current ids); a
served driver adds ``start_query`` (with the query's driver document, ``spec``) and
``stop_query`` (pgval.topologies.serve).
This module imports nothing from pyspark: :class:`SparkExecutors` wraps a live context.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from pgval.core.clock import now_ms
from pgval.faults.executor import MECHANISM

#: File names the driver takes as requests (anything else in the directory is ignored).
REQUEST_RE = re.compile(r"^req-(\d+)\.json$")
POLL_S = 0.25
EXECUTORS_EVERY_S = 0.5


class EventLog(Protocol):
    def write(self, event: str, **fields: Any) -> None: ...


class ExecutorSource(Protocol):
    """What the loop needs from Spark (real: :class:`SparkExecutors`)."""

    def ids(self) -> list[str]: ...

    def hosts(self, ids: Iterable[str]) -> dict[str, str]: ...

    def kill_and_replace(self, executor_id: str) -> bool: ...


def executor_sort_key(executor_id: str) -> tuple[int, int, str]:
    """Numeric ids in numeric order (standalone, YARN and K8s all use integers)."""
    return (0, int(executor_id), "") if executor_id.isdigit() else (1, 0, executor_id)


def choose_executor(ids: Iterable[str], seed: int, index: int | None = None) -> str:
    """The executor a kill with ``executor: null`` hits: the ``index``-th of the sorted ids
    (``--target``), else one drawn by ``seed``: the same ids and seed, the same one."""
    ordered = sorted(ids, key=executor_sort_key)
    if not ordered:
        raise ValueError("no executor is registered with the driver")
    if index is not None:
        if not 0 <= index < len(ordered):
            raise ValueError(f"executor index {index} is out of range: {len(ordered)} "
                             f"executor(s) are registered ({', '.join(ordered)})")
        return ordered[index]
    return random.Random(seed).choice(ordered)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]



class ControlLoop:
    """Answers requests and records executor membership; one daemon thread per driver."""

    def __init__(self, control_dir: Path, log: EventLog, executors: ExecutorSource | None,
                 clock_ms: Callable[[], int] = now_ms,
                 actions: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None
                 ) -> None:
        self.control_dir = Path(control_dir)
        self.control_dir.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.executors = executors
        self.clock_ms = clock_ms
        self._handled: set[tuple[int, int]] = set()
        self._ids: list[str] | None = None
        self._last_error: str | None = None
        self._next_executors_ms = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._actions: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "ping": lambda _req: {"ok": True},
            "executors": self._executors_action,
            "kill-executor": self._kill_action,
            **(actions or {}),  # a served driver's start_query/stop_query
        }

    # ---- the thread ------------------------------------------------------------------------

    def start(self) -> ControlLoop:
        self._thread = threading.Thread(target=self._run, name="pgval-control", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop polling (before the SparkContext stops: no calls into a dying JVM)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(POLL_S)

    def step(self) -> None:
        """One poll: answer pending requests, then record executor changes when due."""
        try:
            self.poll_requests()
        except Exception as exc:  # e.g. the directory vanished: report, keep going
            self._report_error("requests", exc)
        now = self.clock_ms()
        if self.executors is not None and now >= self._next_executors_ms:
            self._next_executors_ms = now + int(EXECUTORS_EVERY_S * 1000)
            try:
                self.poll_executors()
            except Exception as exc:  # the JVM may be busy or going away
                self._report_error("executors", exc)

    def _report_error(self, where: str, exc: BaseException) -> None:
        """One ``control_error`` line per new error text, not one per poll."""
        text = f"{where}: {_first_line(exc)}"
        if text != self._last_error:
            self._last_error = text
            self.log.write("control_error", where=where, error=_first_line(exc))

    # ---- requests --------------------------------------------------------------------------

    def poll_requests(self) -> list[int]:
        """Answer every request file present, lowest number first; returns their numbers."""
        found = []
        for entry in os.scandir(self.control_dir):
            m = REQUEST_RE.match(entry.name)
            if m:
                found.append((int(m.group(1)), entry.inode(), Path(entry.path)))
        answered = []
        for n, inode, path in sorted(found):
            if (n, inode) in self._handled:  # could not delete it last time: never act twice
                continue
            try:
                raw = path.read_bytes()
            except FileNotFoundError:  # withdrawn by the asker (it timed out)
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                self._handled.add((n, inode))
            self._answer(n, raw)
            answered.append(n)
        return answered

    def _answer(self, n: int, raw: bytes) -> None:
        req: Any
        try:
            req = json.loads(raw)
        except ValueError:
            req = None
        fields: dict[str, Any] = {"request": n}
        if not isinstance(req, dict) or not isinstance(req.get("action"), str):
            self.log.write("control", **fields, ok=False,
                           error="malformed request: a JSON object with an \"action\" is needed")
            return
        action = req["action"]
        fields["action"] = action
        if "nonce" in req:
            fields["nonce"] = req["nonce"]
        deadline = req.get("deadline_ms")
        handler = self._actions.get(action)
        if isinstance(deadline, (int, float)) and self.clock_ms() > deadline:
            result: dict[str, Any] = {"ok": False, "error": "request expired before the driver "
                                      "read it; not done"}
        elif handler is None:
            result = {"ok": False, "error": f"unknown action {action!r}; known: "
                      f"{', '.join(sorted(self._actions))}"}
        else:
            try:
                result = handler(req)
            except Exception as exc:  # an answer, never a dead thread
                result = {"ok": False, "error": _first_line(exc)}
        reserved = ("event", "wall_ms", *fields)
        self.log.write("control", **fields,
                       **{k: v for k, v in result.items() if k not in reserved})

    def _current_ids(self) -> list[str]:
        if self.executors is None:
            raise ValueError("this driver has no executor source (local mode?)")
        return sorted((str(i) for i in self.executors.ids()), key=executor_sort_key)

    def _executors_action(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "ids": self._current_ids()}

    def _kill_action(self, req: dict[str, Any]) -> dict[str, Any]:
        before = self._current_ids()
        target = req.get("executor")
        if target is None:
            seed, index = req.get("seed", 0), req.get("index")
            try:
                target = choose_executor(before, seed if isinstance(seed, int) else 0,
                                         index if isinstance(index, int) else None)
            except ValueError as exc:
                return {"ok": False, "executors_before": before, "error": str(exc)}
        else:
            target = str(target)
            if target not in before:
                return {"ok": False, "executor": target, "executors_before": before,
                        "error": f"executor {target} is not registered with the driver "
                                 f"(registered: {', '.join(before) or 'none'})"}
        assert self.executors is not None
        try:
            host = self.executors.hosts([target]).get(target)
        except Exception:  # the host is a detail; the kill is what was asked
            host = None
        kill_ts = self.clock_ms()
        acknowledged = bool(self.executors.kill_and_replace(target))
        result = {"ok": acknowledged, "mechanism": MECHANISM, "executor": target, "host": host,
                  "executors_before": before, "kill_ts": kill_ts}
        if not acknowledged:
            result["error"] = (f"Spark did not acknowledge killing executor {target} "
                               "(killAndReplaceExecutor returned false)")
        return result

    # ---- executors -------------------------------------------------------------------------

    def poll_executors(self) -> None:
        ids = self._current_ids()
        if ids == self._ids:
            return
        old = set(self._ids or [])
        added = [i for i in ids if i not in old]
        removed = sorted(old.difference(ids), key=executor_sort_key)
        self._ids = ids
        hosts: dict[str, str] = {}
        if added:
            try:
                assert self.executors is not None
                hosts = self.executors.hosts(added)
            except Exception:
                hosts = {}
        self.log.write("executors", ts=self.clock_ms(), ids=ids, added=added, removed=removed,
                       hosts=hosts)


class SparkExecutors:
    """The executors of a live SparkContext, through Py4J.

    ``getExecutorIds`` and ``killAndReplaceExecutor`` are ``private[spark]`` in Scala, which
    compiles to public JVM methods; Py4J calls them like any other. ``getExecutorIds`` lists
    the scheduler backend's registered executors (never the driver, unlike
    ``statusTracker().getExecutorInfos()``, which also has no ids). Hosts come from the
    status store, which the listener bus fills a moment later, so they are best effort.
    """

    def __init__(self, spark_context: Any) -> None:
        self._sc = spark_context._jsc.sc()
        self._convert = spark_context._jvm.scala.jdk.javaapi.CollectionConverters

    def _list(self, seq: Any) -> list[Any]:
        return list(self._convert.asJava(seq))

    def ids(self) -> list[str]:
        return [str(i) for i in self._list(self._sc.getExecutorIds())]

    def hosts(self, ids: Iterable[str]) -> dict[str, str]:
        wanted = set(ids)
        out = {}
        for summary in self._list(self._sc.statusStore().executorList(True)):
            eid = str(summary.id())
            if eid in wanted:
                out[eid] = str(summary.hostPort())
        return out

    def kill_and_replace(self, executor_id: str) -> bool:
        return bool(self._sc.killAndReplaceExecutor(executor_id))
