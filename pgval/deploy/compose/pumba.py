"""Faults on the Docker deployment (compose/docker-compose.yml), injected with pumba.

The embedded cluster delays packets with NFQUEUE and kills process groups; with Docker the
unit of failure is a container, and pumba (https://github.com/alexei-led/pumba) is the
usual tool. This module builds pumba's exact argument lists (pure functions, tested) and
runs them as a :class:`PumbaFault` with the inject/remove hooks of pgval's experiments. Its
fault log entries and the rules that judge them are :mod:`pgval.faults.container`'s, so a
re-check judges a compose run without this module (or Docker).

Why the extra care around pumba (its issue numbers in brackets):

* pumba exits 0 when no container matched a name, so a typo would inject nothing. pgval
  resolves the target through the Docker SDK first and checks the effect afterwards: the
  container is down after a kill, a netem qdisc is present during a delay.
* Targets are exact container names, never ``re2:`` patterns: a loose pattern is how a delay
  hit every container on a host (#147).
* netem is removed by pumba when ``--duration`` ends or when it gets SIGTERM, but not after
  SIGKILL (#147), and a leftover qdisc makes the next ``tc qdisc add`` fail with
  ``RTNETLINK answers: File exists`` (#168). pgval deletes a stale netem qdisc before
  injecting and, after pumba is gone, checks with ``tc qdisc show`` that none is left and
  deletes it (``tc qdisc del dev eth0 root``) if one is.
* Teardown can briefly drop all traffic of the target (#166) and old pumba versions die when
  the target is killed mid-delay (#175); both are recorded, neither is hidden.
* netem shapes **egress** only: a delayed worker sends late, it does not receive late.
* ``--jitter`` defaults to 10 ms and ``--correlation`` to 20 % in pumba; with no jitter pumba
  then emits ``delay 500ms 20.00``, which tc reads as 20 us of jitter. pgval always passes
  both, so the qdisc is exactly ``delay <ms>`` (or ``delay <ms> <jitter>ms``).
* ``--pull-image=false``: by default pumba pulls the tc image at injection *and* at removal,
  which shifts T2 by a registry round trip and can fail the removal offline. Pull it once
  (``docker pull``); :class:`PumbaFault` checks it is present before T2.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal as _signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import docker
from docker.errors import APIError, ContainerError, DockerException, ImageNotFound

from pgval.core.clock import now_ms
from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.deploy.compose.stack import (
    HOST_BOOTSTRAP,
    NETWORK_BOOTSTRAP,
    ROLE_LABEL,
    RUNNER_CONTAINER,
    SPARK_MASTER_URL,
    ContainerRef,
    broker_container,
    find_containers,
    get_container,
    require_engine,
    spark_daemon_opts,
    worker_container,
)
from pgval.faults.container import ContainerDelay, ContainerKill, entry
from pgval.host import undo
from pgval.host.procs import Managed, spawn

PUMBA = "pumba"
#: pumba's own default tc sidecar image (iproute2 + iptables on Alpine).
TC_IMAGE = "ghcr.io/alexei-led/pumba-alpine-nettools:latest"
#: pumba never targets containers with this label (its own sidecars carry it).
PUMBA_SKIP_LABEL = "com.gaiaadm.pumba.skip"
#: pumba gives its netem teardown 30 s (netem.cleanupTimeout) before it gives up.
_PUMBA_STOP_GRACE_S = 45.0
_KILL_TIMEOUT_S = 30.0
_APPLY_TIMEOUT_S = 30.0
_IFACE_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")
#: A pumba ≥ PR #349 root qdisc uses this owned handle; older versions put netem at the root.
_PUMBA_HANDLE = "504d:"



# ---- pumba argument lists ------------------------------------------------------------------


def _check_name(container: str) -> None:
    """Exact names only: a ``re2:`` pattern could match more than the one target (#147)."""
    if not container or container.startswith("re2:") or any(c.isspace() for c in container):
        raise ValueError(f"a fault needs one exact container name, got {container!r}")


def _go_duration(seconds: float) -> str:
    """A Go ``time.ParseDuration`` string: whole seconds as ``95s``, else milliseconds."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"the netem duration must be positive, got {seconds!r} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def kill_args(container: str, signal: str = "SIGKILL") -> list[str]:
    """``pumba kill``: send ``signal`` to the container's main process (one shot)."""
    _check_name(container)
    if signal not in _signal.Signals.__members__:
        raise ValueError(f"unknown signal {signal!r}")
    return [PUMBA, "--log-level", "info", "kill", "--signal", signal, container]


def delay_args(container: str, delay_ms: int, duration_s: float, jitter_ms: int = 0,
               interface: str = "eth0", tc_image: str = TC_IMAGE,
               pull_image: bool = False) -> list[str]:
    """``pumba netem delay``: delay the container's egress on ``interface`` for ``duration_s``.

    ``--jitter`` and ``--correlation 0`` are always given (see the module doc: pumba's defaults
    would add jitter); ``--pull-image=false`` unless ``pull_image``.
    """
    _check_name(container)
    if delay_ms <= 0:
        raise ValueError(f"the delay must be positive, got {delay_ms!r} ms")
    if not 0 <= jitter_ms <= delay_ms:  # pumba's own rule
        raise ValueError(f"the jitter must be between 0 and the delay, got {jitter_ms!r} ms")
    if not _IFACE_RE.match(interface):
        raise ValueError(f"not a network interface name: {interface!r}")
    argv = [PUMBA, "--log-level", "info", "netem", "--duration", _go_duration(duration_s),
            "--interface", interface, "--tc-image", tc_image]
    if not pull_image:
        argv.append("--pull-image=false")
    return argv + ["delay", "--time", str(int(delay_ms)), "--jitter", str(int(jitter_ms)),
                   "--correlation", "0", container]


def qdisc_show_args(interface: str = "eth0") -> list[str]:
    return ["tc", "qdisc", "show", "dev", interface]


def qdisc_del_args(interface: str = "eth0") -> list[str]:
    """Delete the root qdisc; the kernel puts its default back (what pumba's teardown does)."""
    return ["tc", "qdisc", "del", "dev", interface, "root"]


def netem_lines(qdisc_show: str) -> list[str]:
    """Lines of ``tc qdisc show`` that are a netem qdisc or pumba's owned root."""
    out = []
    for line in qdisc_show.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "qdisc" and (
                words[1] == "netem" or words[2] == _PUMBA_HANDLE):
            out.append(line.strip())
    return out


# ---- Docker engine and pumba presence ------------------------------------------------------


def require_pumba(path: str | None = None) -> str:
    """The pumba executable on PATH (or on ``path``), or a plain error saying how to get it."""
    found = shutil.which(PUMBA, path=path)
    if found is None:
        raise EnvironmentFailure(
            "pumba was not found on PATH; install it from its GitHub releases "
            "(alexei-led/pumba) to inject faults with --deploy compose")
    return found


def require_tc_image(client: docker.DockerClient, image: str = TC_IMAGE) -> None:
    """pgval runs pumba with ``--pull-image=false``, so the tc image must already be here."""
    try:
        client.images.get(image)
    except ImageNotFound as exc:
        raise EnvironmentFailure(
            f"the tc image {image} is not on this Docker host; run `docker pull {image}` once "
            "(pgval does not let pumba pull it during a run)") from exc


# ---- finding targets -----------------------------------------------------------------------


# ---- tc inside a target's network namespace ------------------------------------------------


class _Tc:
    """Run tc in the target's network namespace: ``docker exec`` if the image has tc, else a
    throw-away sidecar from the tc image joined to the target's network (as pumba does)."""

    def __init__(self, client: docker.DockerClient, tc_image: str = TC_IMAGE) -> None:
        self.client = client
        self.tc_image = tc_image

    def run(self, container: Any, args: list[str], privileged: bool) -> tuple[int, str]:
        try:
            code, raw = container.exec_run(args, privileged=privileged)
            text = (raw or b"").decode(errors="replace")
        except APIError as exc:
            code, text = 127, str(exc)
        if code in (126, 127) or "executable file not found" in text:
            return self._sidecar(container, args)
        if code != 0 and privileged and "Operation not permitted" in text:
            return self._sidecar(container, args)
        return code, text

    def _sidecar(self, container: Any, args: list[str]) -> tuple[int, str]:
        try:
            out = self.client.containers.run(
                self.tc_image, entrypoint=[args[0]], command=args[1:],
                network_mode=f"container:{container.id}", cap_add=["NET_ADMIN"],
                labels={PUMBA_SKIP_LABEL: "true"}, remove=True, stdout=True, stderr=True)
        except ContainerError as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            return int(exc.exit_status or 1), err or str(exc)
        except ImageNotFound:
            require_tc_image(self.client, self.tc_image)
            raise
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out or "")
        return 0, text

    def netem(self, container: Any, interface: str) -> list[str]:
        code, text = self.run(container, qdisc_show_args(interface), privileged=False)
        if code != 0:
            raise EnvironmentFailure(
                f"`tc qdisc show dev {interface}` failed in {container.name}: "
                f"{' '.join(text.split())[:200]}")
        return netem_lines(text)

    def clear(self, container: Any, interface: str) -> bool:
        """Delete a netem root qdisc if there is one; True when something was deleted."""
        if not self.netem(container, interface):
            return False
        code, text = self.run(container, qdisc_del_args(interface), privileged=True)
        left = self.netem(container, interface)
        if left:
            raise EnvironmentFailure(
                f"a netem qdisc is still on {interface} of {container.name} after "
                f"`tc qdisc del` ({' '.join(text.split())[:120] or code}); remove it by hand")
        return True


def netem_qdiscs(container: str, interface: str = "eth0", client: docker.DockerClient | None = None,
                 tc_image: str = TC_IMAGE) -> list[str]:
    """The netem qdisc lines on ``interface`` of a running container (empty: none)."""
    client = client or require_engine()
    return _Tc(client, tc_image).netem(get_container(client, container), interface)


def clear_netem(container: str, interface: str = "eth0", client: docker.DockerClient | None = None,
                tc_image: str = TC_IMAGE) -> bool:
    """Remove a leftover netem qdisc from a running container; True if there was one."""
    client = client or require_engine()
    return _Tc(client, tc_image).clear(get_container(client, container), interface)


def cleanup_netem(client: docker.DockerClient | None = None, interface: str = "eth0",
                  tc_image: str = TC_IMAGE) -> list[str]:
    """For ``pgval cleanup``: clear netem from every running pgval container; names cleared."""
    client = client or require_engine()
    tc = _Tc(client, tc_image)
    cleared = []
    for c in client.containers.list(filters={"label": ROLE_LABEL}):
        with contextlib.suppress(PgvalError, DockerException):
            if tc.clear(c, interface):
                cleared.append(c.name)
    return cleared


def clear_netem_argv(container: str, interface: str = "eth0",
                     tc_image: str = TC_IMAGE) -> list[str]:
    """The command that clears a leftover netem qdisc of ``container`` (an undo record's,
    run by the reaper when pgval died during a delay)."""
    _check_name(container)
    return [sys.executable, "-m", "pgval.deploy.compose.pumba", "--clear-netem", container,
            "--interface", interface, "--tc-image", tc_image]


def main(argv: list[str] | None = None) -> int:
    """``python -m pgval.deploy.compose.pumba --clear-netem CONTAINER``: exit 0 once no netem is
    left on it (1 with a sentence when Docker or the container cannot be reached)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m pgval.deploy.compose.pumba")
    p.add_argument("--clear-netem", required=True, metavar="CONTAINER")
    p.add_argument("--interface", default="eth0")
    p.add_argument("--tc-image", default=TC_IMAGE)
    args = p.parse_args(argv)
    try:
        cleared = clear_netem(args.clear_netem, args.interface, tc_image=args.tc_image)
    except (PgvalError, DockerException, ValueError) as exc:
        print(f"cannot clear netem on {args.clear_netem}: {exc}", file=sys.stderr)
        return 1
    print(f"{'cleared' if cleared else 'no'} netem on {args.clear_netem}")
    return 0


# ---- the fault -----------------------------------------------------------------------------


class PumbaFault:
    """A kill or an egress delay of one container: injected at T2, removed at T3.

    kill: ``pumba kill`` once; at T3 the container is started again (``container.start()``,
    the same container with the same name, volumes and address, like a restarted process).
    delay: ``pumba netem`` runs in its own process group for ``duration_s`` — the safety net
    that ends the delay even if pgval dies, so pass the failure phase plus a margin; at T3
    :meth:`remove` SIGTERMs it (pumba then deletes its qdisc) and checks that no netem is left.
    """

    def __init__(self, name: str, kind: Literal["kill", "delay"], target: str, *,
                 delay_ms: int = 0, duration_s: float = 0.0, jitter_ms: int = 0,
                 signal: str = "SIGKILL", interface: str = "eth0", tc_image: str = TC_IMAGE,
                 pull_image: bool = False, restart: bool = True,
                 client: docker.DockerClient | None = None, pumba: str | None = None,
                 log_dir: Path | None = None, pid_dir: Path | None = None,
                 run_dir: Path | None = None) -> None:
        self.name = name
        #: Where the delay's undo (clear the netem qdisc) is recorded while it acts: pumba
        #: leaves its qdisc behind when SIGKILLed (#147), the run's reaper clears it.
        self.run_dir = run_dir
        self.kind = kind
        self.target = target
        self.interface = interface
        self.tc_image = tc_image
        self.pull_image = pull_image
        self.restart = restart
        self.delay_ms = delay_ms
        self.jitter_ms = jitter_ms
        if kind == "kill":
            self.argv = kill_args(target, signal)
        elif kind == "delay":
            self.argv = delay_args(target, delay_ms, duration_s, jitter_ms, interface,
                                   tc_image, pull_image)
        else:
            raise ValueError(f"unknown pumba fault kind {kind!r}")
        self._client = client
        self._pumba = pumba
        self._log_dir = log_dir
        self._pid_dir = pid_dir
        self._proc: Managed | None = None
        self._injected = False

    # -- plumbing

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = require_engine()
        return self._client

    def _log_path(self) -> Path:
        if self._log_dir is None:
            # No predictable shared /tmp path: a private directory per fault.
            self._log_dir = Path(tempfile.mkdtemp(prefix="pgval-faults-"))
        return self._log_dir / f"pumba-{self.kind}-{self.target}.log"

    def _spawn(self) -> Managed:
        pumba = self._pumba or require_pumba()
        return spawn(f"pumba-{self.kind}-{self.target}", [pumba, *self.argv[1:]],
                     self._log_path(), pid_dir=self._pid_dir)

    def _base(self) -> dict[str, Any]:
        return entry(self.target, self.argv)

    # -- hooks

    def inject(self) -> dict[str, Any]:
        container = get_container(self.client, self.target)
        if container.status != "running":
            raise EnvironmentFailure(f"container {self.target} is {container.status}, not running; "
                                    "a fault needs a running target")
        if self.kind == "kill":
            return self._inject_kill(container)
        return self._inject_delay(container)

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """Undo the fault; safe to call twice and after a failed inject. At teardown
        (``restore=False``) a killed container is not started again just to be stopped."""
        if not self._injected and self._proc is None:
            return {}
        self._injected = False
        if self.kind == "kill":
            return self._remove_kill() if restore else {**self._base(), "restart": False}
        return self._remove_delay()

    # -- kill

    def _inject_kill(self, container: Any) -> dict[str, Any]:
        started = now_ms()
        proc = self._spawn()
        try:
            code = proc.popen.wait(timeout=_KILL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise EnvironmentFailure(f"pumba kill did not finish within {_KILL_TIMEOUT_S:.0f} s; "
                                    f"see {proc.log_path}") from None
        finally:
            proc.stop(grace_s=1.0)  # reaps a leftover group member and drops the pid file
        if code != 0:
            raise EnvironmentFailure(f"pumba kill failed (exit {code}): "
                                    f"{' '.join(proc.log_tail(3).split())[:200]}")
        self._injected = True
        status = self._wait_status(container, {"exited", "dead"}, timeout_s=10.0)
        if status not in ("exited", "dead"):
            raise EnvironmentFailure(f"pumba kill exited 0 but {self.target} is still {status}; "
                                    f"see {proc.log_path}")
        return ContainerKill.entry(self.target, self.argv, status=status, started_ms=started,
                                   stopped_ms=now_ms(),
                                   exit_code=container.attrs.get("State", {}).get("ExitCode"))

    def _remove_kill(self) -> dict[str, Any]:
        out = {**self._base(), "restart": self.restart}
        if not self.restart:
            return out
        container = get_container(self.client, self.target)
        started = now_ms()
        container.start()
        status = self._wait_status(container, {"running"}, timeout_s=30.0)
        if status != "running":
            raise EnvironmentFailure(f"{self.target} did not come back after start() (it is "
                                    f"{status}); see `docker logs {self.target}`")
        return {**out, "restart_ms": started, "running_ms": now_ms()}

    @staticmethod
    def _wait_status(container: Any, wanted: set[str], timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            container.reload()
            if container.status in wanted or time.monotonic() >= deadline:
                return str(container.status)
            time.sleep(0.1)

    # -- delay

    def _inject_delay(self, container: Any) -> dict[str, Any]:
        if not self.pull_image:
            require_tc_image(self.client, self.tc_image)
        tc = _Tc(self.client, self.tc_image)
        stale = tc.clear(container, self.interface)  # pumba #168: `add` fails on a leftover
        if self.run_dir is not None:
            undo.record(self.run_dir, self._undo_name, {
                "argv": clear_netem_argv(self.target, self.interface, self.tc_image),
                "what": f"clear pumba's netem on {self.target}"})
        started = now_ms()
        self._proc = self._spawn()
        deadline = time.monotonic() + _APPLY_TIMEOUT_S
        lines: list[str] = []
        while time.monotonic() < deadline:
            lines = tc.netem(container, self.interface)
            if lines:
                break
            if not self._proc.alive():
                code = self._proc.popen.returncode
                tail = " ".join(self._proc.log_tail(3).split())[:200]
                self._proc = None
                raise EnvironmentFailure(f"pumba netem exited (code {code}) before the delay "
                                        f"was in place: {tail}")
            time.sleep(0.1)
        if not lines:
            self._stop_proc()
            raise EnvironmentFailure(f"no netem qdisc appeared on {self.target} within "
                                    f"{_APPLY_TIMEOUT_S:.0f} s of starting pumba")
        self._injected = True
        return ContainerDelay.entry(
            self.target, self.argv, qdisc=lines[0], started_ms=started, applied_ms=now_ms(),
            stale_netem_deleted=stale, pumba_pid=self._proc.pid, direction="egress",
            delay_ms=self.delay_ms, jitter_ms=self.jitter_ms,
            # Egress only: a round trip grows by D (the embedded delay holds both ways: 2D).
            rtt_added_ms=self.delay_ms)

    def _stop_proc(self) -> int | None:
        """SIGTERM pumba's group so it deletes its qdisc; SIGKILL only after its grace time.

        Waits through the Popen itself so pumba's real exit status is kept (None: it had to be
        killed).
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, _signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=_PUMBA_STOP_GRACE_S)
        code = proc.popen.returncode
        proc.stop(grace_s=0.5)  # whatever is left of the group, and the pid file
        return code

    def _remove_delay(self) -> dict[str, Any]:
        out = self._base()
        proc = self._proc
        out["ended_before_remove"] = proc is not None and not proc.alive()
        out["pumba_exit"] = self._stop_proc()
        out["stopped_ms"] = now_ms()
        try:
            container = get_container(self.client, self.target)
        except PgvalError:
            return {**out, "target_status": "missing", "netem_deleted": False}
        container.reload()
        out["target_status"] = container.status
        if container.status != "running":  # no network namespace left to clean (#175)
            self._undone()
            return {**out, "netem_deleted": False}
        deleted = _Tc(self.client, self.tc_image).clear(container, self.interface)
        self._undone()
        return {**out, "netem_deleted": deleted, "verified_ms": now_ms()}

    @property
    def _undo_name(self) -> str:
        return f"netem-{self.target}"

    def _undone(self) -> None:
        if self.run_dir is not None:
            undo.done(self.run_dir, self._undo_name)


__all__ = [
    "HOST_BOOTSTRAP", "NETWORK_BOOTSTRAP", "RUNNER_CONTAINER", "SPARK_MASTER_URL", "TC_IMAGE",
    "ContainerRef", "PumbaFault", "broker_container", "cleanup_netem", "clear_netem",
    "clear_netem_argv",
    "delay_args", "find_containers", "kill_args", "netem_lines", "netem_qdiscs",
    "qdisc_del_args", "qdisc_show_args", "require_engine", "require_pumba", "require_tc_image",
    "spark_daemon_opts", "worker_container",
]

if __name__ == "__main__":
    sys.exit(main())
