"""Process faults: SIGKILL a Spark worker (and its executors), or the streaming driver.

``crash`` kills the target worker's whole process group at T2 — the worker JVM
and the executor JVMs it forked — and starts the worker again at T3 with the
same namespace and address. ``driver-crash`` kills the driver at T2 and
restarts the same query from its checkpoint at T3 (paper 002's driver failure,
which PGVal did not measure).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgval.experiment import Experiment


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class WorkerCrash:
    name = "crash"

    def __init__(self, target: int) -> None:
        self.target = target
        self._killed = False

    def inject(self, run: Experiment) -> dict[str, Any]:
        worker = run.spark_worker(self.target)
        executors = worker.executor_pids()
        worker.kill()
        self._killed = True
        return {"mechanism": "SIGKILL process group", "target": worker.name,
                "worker_pid": worker.pid, "executor_pids": executors,
                "left_alive": worker.group_pids()}

    def remove(self, run: Experiment, restore: bool = True) -> dict[str, Any]:
        """Restart the worker at T3; at teardown (``restore=False``) there is nothing to undo."""
        if not self._killed:
            return {}
        self._killed = False
        if not restore:
            return {"target": f"worker {self.target}", "restarted": False}
        worker = run.spark_worker(self.target)
        t0 = time.monotonic()
        worker.restart()
        return {"target": worker.name, "restarted_pid": worker.pid,
                "reregistered_s": round(time.monotonic() - t0, 3)}


class DriverCrash:
    name = "driver-crash"

    def __init__(self) -> None:
        self._killed = False

    def inject(self, run: Experiment) -> dict[str, Any]:
        assert run.driver is not None
        pid = run.driver.proc.pid if run.driver.proc else None
        run.driver.kill()
        self._killed = True
        return {"mechanism": "SIGKILL process group", "target": "driver", "driver_pid": pid}

    def remove(self, run: Experiment, restore: bool = True) -> dict[str, Any]:
        if not self._killed:
            return {}
        self._killed = False
        if not restore:
            return {"target": "driver", "restarted": False}
        assert run.driver is not None
        start_s = run.driver.start()
        return {"target": "driver", "restarted_pid": run.driver.proc.pid if run.driver.proc
                else None, "query_restarted_s": round(start_s, 3)}
