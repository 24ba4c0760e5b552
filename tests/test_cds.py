"""Class-data sharing (pgval.host.cds): an archive is recorded from a live JVM, kept only
once a JVM maps it, then mapped by the next JVM of its kind; off, nothing changes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.cluster.local import LocalCluster
from pgval.core.spec import ClusterSpec
from pgval.host import cds

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
    assert not Path(f"/tmp/.java_pid{recorder.pid}").exists()  # jcmd's socket: gone

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
    """A truncated archive kills the JVM given it (SIGBUS) and a changed byte is mapped as
    it is, so neither may ever be kept."""
    source, procs = sleeper
    found = cds.archive("kafka-broker", "java", [source])
    assert found is not None
    found.dump(start(procs, found.flags(), source).pid)
    assert cds.maps_cleanly("java", found.path)
    whole = found.path.read_bytes()
    mid = len(whole) // 2
    flipped = whole[:mid] + bytes([whole[mid] ^ 0xFF]) + whole[mid + 1:]
    for name, damaged in [("third", whole[: len(whole) // 3]), ("end", whole[:-4096]),
                          ("flipped", flipped)]:
        (tmp_path / f"{name}.jsa").write_bytes(damaged)
        assert not cds.maps_cleanly("java", tmp_path / f"{name}.jsa"), name
    assert list(tmp_path.glob("hs_err*")) == []


@pytest.mark.cluster
def test_the_clusters_jvms_record_their_classes_and_the_next_cluster_maps_them(
        cache: Path, tmp_path: Path) -> None:
    """The brokers', master's and worker's archives are mapped by the next cluster's JVMs
    (not only given to them: a JVM silently refuses an archive made with another classpath,
    as each cluster's own conf folder once made every Spark one be)."""
    cfg = ClusterSpec(brokers=1, partitions=1, workers=1)
    with LocalCluster(tmp_path / "one", cfg) as cluster:
        assert cluster.spark is not None and cluster.kafka is not None
        wanted = [*cluster.spark.class_dumps(), *cluster.kafka.class_dumps()]
        assert sorted(found.kind for found, _ in wanted) == [
            "kafka-broker", "spark-master", "spark-worker"]
        for _, pid in wanted:
            assert "-XX:+RecordDynamicDumpInfo" in Path(f"/proc/{pid}/cmdline").read_text()
        assert all(said.startswith("dumped") for said in cds.dump_all(wanted).values())
    with LocalCluster(tmp_path / "two", cfg) as cluster:
        assert cluster.spark is not None and cluster.kafka is not None
        assert cluster.spark.class_dumps() == cluster.kafka.class_dumps() == []
        for found, pid in wanted:
            now = {"kafka-broker": cluster.kafka.node_pid(cluster.kafka.node_ids[0]),
                   "spark-master": cluster.spark.master.pid if cluster.spark.master else None,
                   "spark-worker": cluster.spark.workers[0].pid}[found.kind]
            assert now is not None and now != pid
            assert str(found.path) in Path(f"/proc/{now}/maps").read_text(), found.kind


def test_only_the_newest_archives_of_a_kind_are_kept(tmp_path: Path) -> None:
    for age in range(5):
        made = tmp_path / f"spark-driver-{age}.jsa"
        made.write_bytes(b"x")
        os.utime(made, (1_000_000 - age, 1_000_000 - age))
    (tmp_path / "spark-master-9.jsa").write_bytes(b"x")
    cds._prune(tmp_path, "spark-driver")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "spark-driver-0.jsa", "spark-driver-1.jsa", "spark-driver-2.jsa", "spark-master-9.jsa"]


def test_half_made_archives_are_removed_once_no_live_dump_can_own_them(tmp_path: Path) -> None:
    """A dump pgval gave up on (``.part``) and one whose JVM died while writing
    (``.part.temp``: the JVM writes there, then renames) go after an hour; younger ones
    may still be written and stay."""
    old = [tmp_path / "spark-driver-1.jsa.0a1b2c3d.part",
           tmp_path / "spark-driver-1.jsa.4e5f6a7b.part.temp"]
    young = [tmp_path / "spark-worker-2.jsa.8c9d0e1f.part",
             tmp_path / "spark-worker-2.jsa.2a3b4c5d.part.temp"]
    kept = tmp_path / "spark-driver-0.jsa"
    for made in [*old, *young, kept]:
        made.write_bytes(b"x")
    for made in [*old, kept]:
        os.utime(made, (1_000_000, 1_000_000))
    cds._remove_stale_parts(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in [*young, kept])


def test_a_cache_others_could_write_is_not_used(cache: Path, tmp_path: Path) -> None:
    """An archive is code the JVMs run: one another user could swap is never mapped."""
    cache.mkdir(mode=0o700)
    assert cds.archive("spark-worker", "java", []) is not None
    cache.chmod(0o777)
    assert cds.archive("spark-worker", "java", []) is None
    cache.chmod(0o700)
    made = cds.archive("spark-worker", "java", [])
    assert made is not None
    made.path.write_bytes(b"x")
    made.path.chmod(0o666)
    assert cds.archive("spark-worker", "java", []) is None


def test_a_cache_path_a_jvm_option_cannot_carry_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark splits JVM option strings at whitespace and Java reads ``:`` as two archives."""
    monkeypatch.setenv(cds.ENV, "1")
    for name in ("with space", "with:colon", 'with"quote'):
        monkeypatch.setattr(cds, "cache_dir", lambda name=name: tmp_path / name)
        assert cds.archive("spark-master", "java", []) is None, name


def test_dumps_wait_for_a_later_run_once_a_signal_is_pending(cache: Path) -> None:
    found = cds.ClassArchive("spark-master", cache / "m.jsa", "java", recording=True)
    said = cds.dump_all([(found, os.getpid())], stop=lambda: True)
    assert said == {"spark-master": "left for a later run"} and not found.path.exists()


def test_a_run_dumps_what_saves_most_first_and_leaves_the_rest_past_its_budget(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine's first run pays a part of the archives (the driver's first, then the
    executors'), the next runs the rest: :data:`pgval.run.teardown.DUMP_BUDGET_S`."""
    from types import SimpleNamespace

    from pgval.run import teardown

    kinds = ("spark-master", "spark-worker", "spark-executor", "kafka-broker")
    daemons = [(cds.ClassArchive(k, cache / f"{k}.jsa", "java", recording=True), 1)
               for k in kinds]
    driver = (cds.ClassArchive("spark-driver", cache / "d.jsa", "java", recording=True), 2)
    clock = [0.0]

    def dump(self: cds.ClassArchive, pid: int, timeout_s: float) -> str:
        clock[0] += 5.0  # every dump takes 5 s
        return "dumped"

    monkeypatch.setattr(cds.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(cds.ClassArchive, "dump", dump)
    started = SimpleNamespace(deployment=SimpleNamespace(class_dumps=lambda: list(daemons)),
                              driver=SimpleNamespace(class_dump=lambda: driver))
    said = teardown.dump_class_archives(started).notes["class_archives"]  # type: ignore[arg-type]
    assert list(said) == ["spark-driver", "spark-executor", "kafka-broker", "spark-master",
                          "spark-worker"]
    assert [said[k] for k in said] == ["dumped", "dumped", *["left for a later run"] * 3]


BATCH_SESSION = """
import json, pathlib, time
t0 = time.monotonic()
from pgval.topologies.batch import batch_session, stop_batch_session
spark = batch_session({}, heap_mb=512)
assert spark.range(100).count() == 100
jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
maps = pathlib.Path(f"/proc/{jvm}/maps").read_text()
opts = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
up = time.monotonic() - t0
print(json.dumps({"opts": opts, "maps": maps, "up_s": up, "note": stop_batch_session(spark)}))
"""


def test_a_batch_session_records_its_archive_and_the_next_one_maps_it(
        tmp_path: Path) -> None:
    """The batch oracle's local session (a JVM of its own each run) records its classes
    once, at its stop, and the next batch session maps them."""
    import json
    import sys

    env = {**os.environ, "PGVAL_CACHE": str(tmp_path / "cache"), cds.ENV: "1"}
    jars = Path(os.environ.get("PGVAL_CACHE", Path.home() / ".cache" / "pgval")) / "jars"
    if jars.is_dir():  # the resolved jars, not a new download
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / "jars").symlink_to(jars)

    def session() -> dict:
        out = subprocess.run([sys.executable, "-c", BATCH_SESSION], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, check=True)
        # The JVM shares the process's stdout (its CDS warnings come after the line).
        return json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("{")))

    first = session()
    assert "-XX:+RecordDynamicDumpInfo" in first["opts"]
    assert first["note"].startswith("dumped"), first["note"]
    (made,) = (tmp_path / "cache" / "cds").glob("batch-session-*.jsa")
    second = session()
    assert f"-XX:SharedArchiveFile={made}" in second["opts"] and second["note"] is None
    assert str(made) in second["maps"]
    print("batch session up", first["up_s"], "recording,", second["up_s"], "mapped")
