"""Class-data sharing (pgval.host.cds): an archive is recorded from a live JVM, kept only
once a JVM maps it, then mapped by the next JVM of its kind; off, nothing changes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.host import cds
from pgval.kafka.broker import KafkaCluster

SLEEPER = "public class Sleep { public static void main(String[] a) throws Exception {" \
          " System.out.println(\"up\"); Thread.sleep(120000); } }\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cds"
    monkeypatch.setattr(cds, "cache_dir", lambda: where)
    monkeypatch.setenv(cds.ENV, "1")
    return where


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """A Java program that waits (the source launcher: no compiler step), and every JVM a
    test starts from it, killed at the end."""
    source = tmp_path / "Sleep.java"
    source.write_text(SLEEPER)
    procs: list[subprocess.Popen[bytes]] = []
    yield source, procs
    for p in procs:
        p.kill()
        p.wait()


def start(procs: list[subprocess.Popen[bytes]], flags: list[str], source: Path,
          log: Path | None = None) -> subprocess.Popen[bytes]:
    argv = ["java", *flags, *([f"-Xlog:class+load=info:file={log}"] if log else []),
            str(source)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=source.parent)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


def test_off_means_no_archive_and_no_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cds.ENV, "0")
    assert cds.archive("spark-driver", "java", []) is None
    assert cds.flags_text(None) == ""


def test_the_archive_follows_the_jvm_kind_and_the_jars(cache: Path, tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"one")
    first = cds.archive("spark-executor", "java", [jars])
    assert first is not None and first.recording
    assert first.flags() == ["-XX:+RecordDynamicDumpInfo"]
    assert cds.archive("spark-executor", "java", [jars]) == first
    assert cds.archive("spark-driver", "java", [jars]).path != first.path
    (jars / "a.jar").write_bytes(b"other")  # another jar: another archive
    assert cds.archive("spark-executor", "java", [jars]).path != first.path
    with pytest.raises(ValueError):
        cds.archive("something", "java", [jars])


def test_a_recording_jvm_is_dumped_and_the_next_one_maps_it(
        cache: Path, sleeper: tuple[Path, list[subprocess.Popen[bytes]]],
        tmp_path: Path) -> None:
    source, procs = sleeper
    found = cds.archive("spark-driver", "java", [source])
    assert found is not None and found.recording
    recorder = start(procs, found.flags(), source)
    assert cds.dump_all([(found, recorder.pid)]) == {
        "spark-driver": f"dumped ({found.path.stat().st_size >> 20} MiB)"}
    assert list(cache.glob("*.part")) == []

    again = cds.archive("spark-driver", "java", [source])
    assert again is not None and not again.recording
    assert again.flags() == [f"-XX:SharedArchiveFile={found.path}"]
    log = tmp_path / "classes.log"
    user = start(procs, again.flags(), source, log)
    assert str(found.path) in Path(f"/proc/{user.pid}/maps").read_text()
    assert "source: shared objects file (top)" in log.read_text()  # the dynamic archive's

    # A JVM that does not record cannot be dumped; nothing half-made is left.
    other = cds.ClassArchive("spark-master", cache / "m.jsa", "java", recording=True)
    assert other.dump(user.pid).startswith("the dump failed")
    assert not other.path.exists() and list(cache.glob("*.part")) == []


def test_a_damaged_archive_is_never_kept(cache: Path,
                                         sleeper: tuple[Path, list[subprocess.Popen[bytes]]],
                                         tmp_path: Path) -> None:
    """A truncated archive kills the JVM given it (SIGBUS), so one must never be kept."""
    source, procs = sleeper
    found = cds.archive("kafka-broker", "java", [source])
    assert found is not None
    found.dump(start(procs, found.flags(), source).pid)
    assert cds.maps_cleanly("java", found.path)
    cut = tmp_path / "cut.jsa"
    cut.write_bytes(found.path.read_bytes()[: found.path.stat().st_size // 3])
    assert not cds.maps_cleanly("java", cut)
    assert list(tmp_path.glob("hs_err*")) == []


@pytest.mark.cluster
def test_a_broker_records_its_classes_and_the_next_broker_maps_them(
        cache: Path, tmp_path: Path) -> None:
    with KafkaCluster(tmp_path / "one", brokers=1, sasl=False) as kafka:
        (found, pid), = kafka.class_dumps()
        assert found.kind == "kafka-broker" and pid == kafka.node_pid(kafka.node_ids[0])
        assert "-XX:+RecordDynamicDumpInfo" in Path(f"/proc/{pid}/cmdline").read_text()
        assert found.dump(pid).startswith("dumped")
    with KafkaCluster(tmp_path / "two", brokers=1, sasl=False) as kafka:
        assert kafka.class_dumps() == []  # it maps the archive, records nothing
        pid = kafka.node_pid(kafka.node_ids[0])
        assert pid is not None and os.path.exists(f"/proc/{pid}")
        assert str(found.path) in Path(f"/proc/{pid}/maps").read_text()


def test_only_the_newest_archives_of_a_kind_are_kept(tmp_path: Path) -> None:
    for age in range(5):
        made = tmp_path / f"spark-driver-{age}.jsa"
        made.write_bytes(b"x")
        os.utime(made, (1_000_000 - age, 1_000_000 - age))
    (tmp_path / "spark-master-9.jsa").write_bytes(b"x")
    cds._prune(tmp_path, "spark-driver")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "spark-driver-0.jsa", "spark-driver-1.jsa", "spark-driver-2.jsa", "spark-master-9.jsa"]
