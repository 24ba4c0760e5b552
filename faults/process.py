"""Process faults: SIGKILL a Spark worker (and its executors), or the streaming driver.

``crash`` kills the target worker's whole process group at T2 — the worker JVM
and the executor JVMs it forked — and starts the worker again at T3 with the
same namespace and address. ``driver-crash`` kills the driver at T2 and
restarts the same query from its checkpoint at T3 (paper 002's driver failure,
which PGVal did not measure). Each gets only its target: a worker handle, the driver.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class CrashableWorker(Protocol):
    """What :class:`WorkerCrash` needs of a worker (``pgval.runtime.spark.WorkerHandle``)."""

    name: str
    pid: int | None

    def executor_pids(self) -> list[int]: ...

    def group_pids(self) -> list[int]: ...

    def kill(self) -> None: ...

    def restart(self) -> None: ...


class RestartableDriver(Protocol):
    """What :class:`DriverCrash` needs of the driver (``pgval.runtime.driver.DriverProcess``)."""

    def pid(self) -> int | None: ...

    def kill(self) -> None: ...

    def start(self) -> float: ...


class WorkerCrash:
    name = "crash"

    def __init__(self, worker: CrashableWorker) -> None:
        self.worker = worker
        self._killed = False

    def inject(self) -> dict[str, Any]:
        worker = self.worker
        executors = worker.executor_pids()
        worker.kill()
        self._killed = True
        return {"mechanism": "SIGKILL process group", "target": worker.name,
                "worker_pid": worker.pid, "executor_pids": executors,
                "left_alive": worker.group_pids()}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """Restart the worker at T3; at teardown (``restore=False``) there is nothing to undo."""
        if not self._killed:
            return {}
        self._killed = False
        if not restore:
            return {"target": self.worker.name, "restarted": False}
        t0 = time.monotonic()
        self.worker.restart()
        return {"target": self.worker.name, "restarted_pid": self.worker.pid,
                "reregistered_s": round(time.monotonic() - t0, 3)}


class DriverCrash:
    name = "driver-crash"

    def __init__(self, driver: RestartableDriver) -> None:
        self.driver = driver
        self._killed = False

    def inject(self) -> dict[str, Any]:
        pid = self.driver.pid()
        self.driver.kill()
        self._killed = True
        return {"mechanism": "SIGKILL process group", "target": "driver", "driver_pid": pid}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        if not self._killed:
            return {}
        self._killed = False
        if not restore:
            return {"target": "driver", "restarted": False}
        start_s = self.driver.start()
        return {"target": "driver", "restarted_pid": self.driver.pid(),
                "query_restarted_s": round(start_s, 3)}
