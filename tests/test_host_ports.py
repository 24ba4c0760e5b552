"""Ports pgval's daemons listen on, and errors that say why a daemon did not start."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pgval.host import procs


def test_listen_ports_come_from_below_the_ephemeral_range() -> None:
    span = procs.listen_port_range()
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert span == (10_000, low - 1)
    ports = {procs.free_port() for _ in range(50)}
    assert all(10_000 <= p < low for p in ports)
    assert len(ports) > 40  # drawn at random, not the same few


def test_a_busy_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        draws = iter([taken, taken, taken + 1 if taken < 65535 else taken - 1])
        monkeypatch.setattr(procs, "listen_port_range", lambda: (taken, taken + 1))
        monkeypatch.setattr(procs.random, "randint", lambda _a, _b: next(draws))
        assert procs.free_port() != taken


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
