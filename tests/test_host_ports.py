"""Ports pgval's daemons listen on, and errors that say why a daemon did not start."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from pgval.host import procs


def test_listen_ports_come_from_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low < 11_000:
        pytest.skip(f"this kernel's ephemeral range starts at {low}: no room below it")
    assert procs.listen_port_range() == (10_000, low - 1)
    ports = [procs.free_port() for _ in range(50)]
    assert all(10_000 <= p < low for p in ports)
    assert len(set(ports)) == 50  # never the same port twice in one process


def test_a_busy_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real bind check: a port some socket holds is drawn, refused, drawn again."""
    span = procs.listen_port_range() or (10_000, 30_000)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        real = procs._DRAW.randint
        draws = iter([taken, taken])
        monkeypatch.setattr(procs._DRAW, "randint",
                            lambda a, b: next(draws, None) or real(*span))
        assert procs.free_port() != taken
        assert next(draws, None) is None  # both draws of the busy port were refused


def test_a_seeded_random_module_does_not_fix_the_ports() -> None:
    """Hypothesis seeds `random` per example: two processes doing so must not draw alike."""
    random.seed(7)
    first = procs.free_port()
    random.seed(7)
    assert procs.free_port() != first


def test_without_room_below_the_range_the_os_picks(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    narrow = tmp_path / "range"
    narrow.write_text("1024\t65535\n")
    monkeypatch.setattr(procs, "_EPHEMERAL_RANGE", narrow)
    assert procs.listen_port_range() is None
    assert 1024 <= procs.free_port() <= 65535
    monkeypatch.setattr(procs, "_EPHEMERAL_RANGE", tmp_path / "missing")
    assert procs.listen_port_range() is None


def test_the_cause_of_a_failed_start_is_the_last_line_that_says_one(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    log.write_text(
        "[2026-11-26 17:39:05] INFO starting (kafka.server.KafkaRaftServer)\n"
        "[2026-11-26 17:39:07] ERROR [KafkaRaftServer nodeId=0] Fatal error during startup. "
        "(kafka.server.KafkaRaftServer)\n"
        "org.apache.kafka.common.KafkaException: Socket server failed to bind to "
        "127.0.0.1:39265: Address already in use.\n"
        "\tat kafka.network.Acceptor.openServerSocket(SocketServer.scala:734)\n"
        "[2026-11-26 17:39:08] ERROR Exiting Kafka due to fatal exception\n")
    assert procs.log_cause(log).endswith("127.0.0.1:39265: Address already in use.")
    assert procs.log_cause(log, limit=20) == "org.apache.kafka.co…"
    quiet = tmp_path / "quiet.log"
    quiet.write_text("INFO started\n")
    errors = tmp_path / "errors.log"
    errors.write_text("java.lang.IllegalStateException: bad\nERROR then quit\nINFO bye\n")
    assert procs.log_cause(errors) == "java.lang.IllegalStateException: bad"
    assert procs.log_cause(quiet) == ""
    assert procs.log_cause(tmp_path / "gone.log") == ""
    # A daemon restarted in the same folder appends to the log: only its own part counts.
    restarted = tmp_path / "restarted.log"
    restarted.write_bytes(log.read_bytes())
    start = restarted.stat().st_size
    with restarted.open("a") as fh:
        fh.write("INFO starting again\nERROR the log directory is unreadable\n")
    assert "Address already in use" in procs.log_cause(restarted)  # the older cause wins
    assert procs.log_cause(restarted, start=start) == "ERROR the log directory is unreadable"
    assert procs.log_cause(restarted, start=restarted.stat().st_size) == ""
