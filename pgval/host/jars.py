"""The jars the local runtime needs: a Kafka broker classpath and Spark's Kafka connector.

They are resolved once into a cache (``$PGVAL_CACHE/jars``, default ``~/.cache/pgval/jars``)
with Maven and the bundled ``pom.xml``; without Maven, a fixed list of artifacts is downloaded
from Maven Central and checked against its ``.sha1`` files. A stamp file holding the pom's
hash makes repeated calls free, and a file lock keeps parallel runs from resolving twice.

The two classpaths are kept apart on purpose: the broker brings its own Scala, Jackson and
kafka-clients versions, which must not leak onto Spark's driver and executor classpath.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.core.files import write_public
from pgval.host.procs import file_lock, spawn

log = logging.getLogger(__name__)

POM_PATH = Path(__file__).with_name("pom.xml")
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
MIN_JAVA = 17
#: The pyspark of a default install (pyproject's ``[spark]`` extra, the compose images).
SPARK_VERSION = "4.2.0"
#: The Spark lines pgval runs on, each with its Scala binary version and the versions of
#: kafka-clients and commons-pool2 its Kafka connector depends on (Spark's own poms: 4.2
#: ``kafka.version`` 3.9.2; 3.5 3.4.1). Maven resolves those itself; the table is for a
#: machine without Maven, which downloads the fixed list.
SPARK_LINES: dict[str, tuple[str, str, str]] = {
    "4.2": ("2.13", "3.9.2", "2.13.1"),
    "3.5": ("2.12", "3.4.1", "2.11.1"),
}
SUPPORTED_SPARK = "pyspark 3.5.x and 4.2.x"
#: The connector of the same line to fall back on when a pyspark's own is not served
#: (Maven Central here has the 3.5.0 and 3.5.1 connectors, not 3.5.9's, and 4.2.0's, not
#: 4.2.1's); within a line Spark keeps the data source API the connector uses.
CONNECTOR_FALLBACK = {"3.5": "3.5.1", "4.2": SPARK_VERSION}
#: Delta Lake's release for each Spark line (``--sink delta``): the one whose pom names
#: that Spark (delta-spark 4.4.0: Spark 4.2.0; 3.2.1: Spark 3.5).
DELTA_FOR_SPARK: dict[str, str] = {"4.2": "4.4.0", "3.5": "3.2.1"}
#: Used when a mirror lacks spark-token-provider-kafka-0-10 for SPARK_VERSION. Every member it
#: references resolves against pyspark 4.2.0's jars except two log keys used only while fetching
#: Kerberos delegation tokens, which pgval never does.
TOKEN_PROVIDER_FALLBACK = "4.1.0-preview1"
_TOKEN_PROVIDER = "spark-token-provider-kafka-0-10"
_STAMP = "stamp.json"

#: The broker profile's resolved runtime classpath (``mvn -Pbroker dependency:list``).
BROKER_ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("org.apache.kafka", "kafka_2.13", "4.1.1"),
    ("org.apache.kafka", "kafka-clients", "4.1.1"),
    ("com.github.luben", "zstd-jni", "1.5.6-10"),
    ("org.lz4", "lz4-java", "1.8.0"),
    ("org.xerial.snappy", "snappy-java", "1.1.10.7"),
    ("org.scala-lang", "scala-library", "2.13.16"),
    ("org.apache.kafka", "kafka-server-common", "4.1.1"),
    ("org.pcollections", "pcollections", "4.0.2"),
    ("org.apache.kafka", "kafka-group-coordinator-api", "4.1.1"),
    ("org.apache.kafka", "kafka-group-coordinator", "4.1.1"),
    ("org.hdrhistogram", "HdrHistogram", "2.2.2"),
    ("com.dynatrace.hash4j", "hash4j", "0.22.0"),
    ("org.apache.kafka", "kafka-transaction-coordinator", "4.1.1"),
    ("org.apache.kafka", "kafka-metadata", "4.1.1"),
    ("org.apache.kafka", "kafka-storage-api", "4.1.1"),
    ("org.apache.kafka", "kafka-tools-api", "4.1.1"),
    ("org.apache.kafka", "kafka-raft", "4.1.1"),
    ("org.apache.kafka", "kafka-storage", "4.1.1"),
    ("com.github.ben-manes.caffeine", "caffeine", "3.2.0"),
    ("org.jspecify", "jspecify", "1.0.0"),
    ("org.apache.kafka", "kafka-server", "4.1.1"),
    ("org.apache.kafka", "kafka-coordinator-common", "4.1.1"),
    ("org.apache.kafka", "kafka-share-coordinator", "4.1.1"),
    ("net.sourceforge.argparse4j", "argparse4j", "0.7.0"),
    ("commons-validator", "commons-validator", "1.9.0"),
    ("commons-beanutils", "commons-beanutils", "1.9.4"),
    ("commons-digester", "commons-digester", "2.1"),
    ("commons-logging", "commons-logging", "1.3.2"),
    ("commons-collections", "commons-collections", "3.2.2"),
    ("com.fasterxml.jackson.core", "jackson-databind", "2.19.0"),
    ("com.fasterxml.jackson.core", "jackson-annotations", "2.19.0"),
    ("com.fasterxml.jackson.core", "jackson-core", "2.19.0"),
    ("com.fasterxml.jackson.dataformat", "jackson-dataformat-csv", "2.19.0"),
    ("com.fasterxml.jackson.datatype", "jackson-datatype-jdk8", "2.19.0"),
    ("com.fasterxml.jackson.dataformat", "jackson-dataformat-yaml", "2.19.0"),
    ("org.yaml", "snakeyaml", "2.4"),
    ("net.sf.jopt-simple", "jopt-simple", "5.0.4"),
    ("org.bitbucket.b_c", "jose4j", "0.9.6"),
    ("com.yammer.metrics", "metrics-core", "2.2.0"),
    ("org.scala-lang", "scala-reflect", "2.13.16"),
    ("com.typesafe.scala-logging", "scala-logging_2.13", "3.9.5"),
    ("org.slf4j", "slf4j-api", "1.7.36"),
    ("com.google.re2j", "re2j", "1.8"),
    ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
    ("org.apache.logging.log4j", "log4j-api", "2.24.3"),
    ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
)

@dataclass(frozen=True)
class SparkLine:
    """The pyspark installed here, and what its Kafka connector needs."""

    version: str  # pyspark's, e.g. "4.2.0" or "3.5.9"
    scala: str  # Scala binary version of its jars, "2.13" or "2.12"
    connector: str | None = None  # the connector's version when not pyspark's own

    @property
    def line(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def with_connector(self, version: str) -> SparkLine:
        """This pyspark with the connector of another version of its line."""
        return SparkLine(self.version, self.scala, version)

    @property
    def artifacts(self) -> tuple[tuple[str, str, str], ...]:
        """The connector's jars that pyspark's own jars directory lacks, and spark-avro
        (``from_avro`` for jobs whose records are Avro)."""
        _, kafka, pool = SPARK_LINES[self.line]
        connector = self.connector or self.version
        return (("org.apache.spark", f"spark-sql-kafka-0-10_{self.scala}", connector),
                ("org.apache.spark", f"{_TOKEN_PROVIDER}_{self.scala}", connector),
                ("org.apache.kafka", "kafka-clients", kafka),
                ("org.apache.commons", "commons-pool2", pool),
                ("org.apache.spark", f"spark-avro_{self.scala}", connector))

    @property
    def kafka_clients(self) -> tuple[str, str, str]:
        return self.artifacts[2]


def installed_spark() -> SparkLine:
    """The pyspark of this Python, or one sentence: not installed, or a line pgval does not
    run on. Read from its package metadata and jars, without importing it (no JVM)."""
    from importlib import metadata

    try:
        version = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        raise EnvironmentFailure("pyspark is not installed: pip install '.[spark]' in "
                                 "pgval's checkout") from None
    line = ".".join(version.split(".")[:2])
    if line not in SPARK_LINES:
        raise EnvironmentFailure(f"pgval runs on {SUPPORTED_SPARK}; this Python has pyspark "
                                f"{version}")
    scala = SPARK_LINES[line][0]
    try:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        jars = Path(spec.origin).parent / "jars" if spec and spec.origin else None
        found = sorted(jars.glob("scala-library-*.jar")) if jars else []
        if found:
            scala = ".".join(found[0].stem.removeprefix("scala-library-").split(".")[:2])
    except (ImportError, ValueError, OSError):
        pass
    return SparkLine(version, scala)


@dataclass(frozen=True)
class Jars:
    """Resolved jar paths: the broker's classpath and the jars to add to Spark (empty
    where no pyspark is installed: the broker alone needs none)."""

    kafka_classpath: list[Path]
    spark_kafka_jars: list[Path]

    @property
    def kafka_classpath_str(self) -> str:
        """For ``java -cp``."""
        return os.pathsep.join(str(p) for p in self.kafka_classpath)

    @property
    def spark_jars_csv(self) -> str:
        """For ``spark.jars`` / ``--jars``."""
        return ",".join(str(p) for p in self.spark_kafka_jars)


def default_cache_dir() -> Path:
    """``$PGVAL_CACHE/jars`` if set, else ``~/.cache/pgval/jars``."""
    root = os.environ.get("PGVAL_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "pgval"
    return base / "jars"


def java_executable() -> str | None:
    """``$JAVA_HOME/bin/java`` when set (Spark uses it too), else ``java`` from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


@functools.cache
def check_java(min_version: int = MIN_JAVA) -> int:
    """Return the Java feature version, or raise a plain error saying what to install.

    Cached per process (a JVM launch costs a few hundred ms); failures are not cached.
    """
    java = java_executable()
    if java is None:
        raise EnvironmentFailure(
            f"Java {min_version} or newer is required but `java` was not found on PATH"
        )
    with tempfile.TemporaryDirectory(prefix="pgval-java-") as tmp:
        out = _run("java-version", [java, "-version"], Path(tmp) / "java.log", timeout_s=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        raise EnvironmentFailure(f"could not tell the Java version from `{java} -version`")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < min_version:
        raise EnvironmentFailure(
            f"Java {min_version} or newer is required but `{java}` is Java {major}"
        )
    return major


def ensure_jars(cache_dir: Path | None = None, spark: bool | None = None) -> Jars:
    """Resolve the broker's jars and the installed pyspark's connector jars into
    ``cache_dir`` once; later calls just list them. ``spark``: whether the connector is
    wanted (None: when pyspark is installed)."""
    cache = (cache_dir or default_cache_dir()).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    broker = _ensure(cache, "broker", lambda: _resolve(cache, "broker", None))
    line = None
    if spark or spark is None:
        try:
            line = installed_spark()
        except PgvalError:
            if spark:
                raise
    connector = (_ensure(cache, f"spark-{line.version}",
                         lambda: _resolve(cache, f"spark-{line.version}", line))
                 if line is not None else [])
    return Jars(kafka_classpath=broker, spark_kafka_jars=connector)


def delta_version() -> str:
    """The Delta Lake release for the installed Spark line (:data:`DELTA_FOR_SPARK`)."""
    return DELTA_FOR_SPARK[installed_spark().line]


def ensure_delta_jars(cache_dir: Path | None = None) -> list[Path]:
    """Delta Lake's two jars for the installed Spark (``--sink delta``), resolved once:
    ``delta-spark`` and ``delta-storage``, nothing they name that pyspark ships."""
    cache = (cache_dir or default_cache_dir()).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    line = installed_spark()
    version = DELTA_FOR_SPARK[line.line]
    name = f"delta-{version}_{line.scala}"

    def resolve() -> dict[str, str]:
        mvn = shutil.which("mvn")
        if mvn is not None:
            _maven_copy(mvn, cache, "delta", name, [f"-Ddelta.version={version}",
                                                    f"-Dscala.binary.version={line.scala}"])
            return {"method": "maven", "delta": version}
        try:
            _download_all((("io.delta", f"delta-spark_{line.scala}", version),
                           ("io.delta", "delta-storage", version)), cache / f"{name}.tmp")
        except OSError as exc:
            raise EnvironmentFailure(f"could not download Delta Lake's jars from "
                                     f"{MAVEN_CENTRAL} ({exc}); install Maven (`mvn`) or "
                                     "allow HTTPS access to Maven Central") from exc
        _replace_dir(cache / f"{name}.tmp", cache / name)
        return {"method": "direct", "delta": version}

    return _ensure(cache, name, resolve)


def _resolve(cache: Path, name: str, line: SparkLine | None) -> dict[str, str]:
    """The broker's jars (``line`` None) or ``line``'s connector, by Maven or directly."""
    mvn = shutil.which("mvn")
    if mvn is not None:
        return _resolve_with_maven(mvn, cache, name, line)
    log.info("mvn not found; downloading jars from Maven Central directly")
    return _resolve_direct(cache, name, line)


def _ensure(cache: Path, name: str, resolve: Callable[[], dict[str, str]]) -> list[Path]:
    """One folder of jars, resolved (``resolve``) under a lock unless its stamp says it is
    complete for this pom."""
    pom_hash = hashlib.sha256(POM_PATH.read_bytes()).hexdigest()
    jars = _cached(cache / name, pom_hash)
    if jars is not None:
        return jars
    with _locked(cache / ".lock"):
        jars = _cached(cache / name, pom_hash)  # another process may have finished meanwhile
        if jars is not None:
            return jars
        (cache / name / _STAMP).unlink(missing_ok=True)
        detail = resolve()
        write_public(cache / name / _STAMP,
                     json.dumps({"pom_sha256": pom_hash, **detail}, indent=1))
    jars = _cached(cache / name, pom_hash)
    if jars is None:  # pragma: no cover - only if the cache was changed under us
        raise EnvironmentFailure(f"the jar cache {cache} is incomplete; delete it and retry")
    return jars


def _cached(folder: Path, pom_hash: str) -> list[Path] | None:
    try:
        info = json.loads((folder / _STAMP).read_text())
    except (OSError, ValueError):
        return None
    if info.get("pom_sha256") != pom_hash:
        return None
    return sorted(folder.glob("*.jar")) or None


_locked = file_lock


def _run(name: str, argv: Sequence[str], log_path: Path, timeout_s: float) -> str:
    """Run a short-lived command in its own process group; return its output or raise."""
    log_path.unlink(missing_ok=True)
    proc = spawn(name, argv, log_path)
    try:
        code = proc.popen.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentFailure(
            f"{name} did not finish within {timeout_s:.0f} s; see {log_path}"
        ) from exc
    finally:
        proc.stop(grace_s=2.0)
    out = log_path.read_text(errors="replace") if log_path.exists() else ""
    if code != 0:
        raise _CommandFailed(name, code, out, log_path)
    return out


class _CommandFailed(EnvironmentFailure):
    """A command that failed, with its output (Maven's: which artifact it lacked)."""

    def __init__(self, name: str, code: int, output: str, log_path: Path) -> None:
        super().__init__(f"{name} failed with exit code {code}; see {log_path}")
        self.output = output


def _resolve_with_maven(mvn: str, cache: Path, name: str,
                        line: SparkLine | None) -> dict[str, str]:
    """``mvn dependency:copy-dependencies`` of one profile into a fresh directory: the
    broker's, or the connector of ``line`` (its version and Scala given to the pom)."""
    if line is None:
        _maven_copy(mvn, cache, "broker", name, [])
        return {"method": "maven"}
    detail = {"method": "maven", "spark": line.version, "connector": line.version,
              "token_provider": line.version}
    versions = [f"-Dspark.version={line.version}", f"-Dscala.binary.version={line.scala}"]
    try:
        _maven_copy(mvn, cache, "spark", name, versions)
    except _CommandFailed as exc:
        fallback = CONNECTOR_FALLBACK.get(line.line)
        if "spark-sql-kafka-0-10" in exc.output and fallback and fallback != line.version:
            log.warning("Spark's Kafka connector %s is not served here; using %s of the same "
                        "line", line.version, fallback)
            _maven_copy(mvn, cache, "spark", name, [f"-Dspark.version={fallback}",
                                                    f"-Dscala.binary.version={line.scala}"])
            return {**detail, "connector": fallback, "token_provider": fallback}
        if _TOKEN_PROVIDER not in exc.output or line.version != SPARK_VERSION:
            raise
        log.warning(
            "%s:%s is not available from this Maven repository; using %s instead",
            _TOKEN_PROVIDER, line.version, TOKEN_PROVIDER_FALLBACK,
        )
        override = f"-Dspark.token.provider.version={TOKEN_PROVIDER_FALLBACK}"
        _maven_copy(mvn, cache, "spark", name, [*versions, override])
        detail["token_provider"] = TOKEN_PROVIDER_FALLBACK
    return detail


def _maven_copy(mvn: str, cache: Path, profile: str, name: str, extra: list[str]) -> None:
    tmp = cache / f"{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = [
        mvn, "-q", "-B", "-f", str(POM_PATH), f"-P{profile}",
        "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", *extra,
    ]
    try:
        _run(f"mvn-{name}", argv, cache / f"mvn-{name}.log", timeout_s=1800)
    except FileNotFoundError as exc:  # pragma: no cover - spawn already maps this
        raise EnvironmentFailure("Maven (`mvn`) vanished while resolving jars") from exc
    _replace_dir(tmp, cache / name)


def _replace_dir(tmp: Path, final: Path) -> None:
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def _resolve_direct(cache: Path, name: str, line: SparkLine | None) -> dict[str, str]:
    """Download a fixed artifact list from Maven Central, verifying each ``.sha1``."""
    artifacts = BROKER_ARTIFACTS if line is None else line.artifacts
    detail = {"method": "direct"}
    tmp = cache / f"{name}.tmp"
    try:
        try:
            _download_all(artifacts, tmp)
        except _NotFound as exc:
            fallback = CONNECTOR_FALLBACK.get(line.line) if line is not None else None
            if fallback and exc.artifact.startswith("spark-sql-kafka-0-10"):
                log.warning("Spark's Kafka connector %s is not served here; using %s of the "
                            "same line", line.version, fallback)
                _download_all(line.with_connector(fallback).artifacts, tmp)
                _replace_dir(tmp, cache / name)
                return {**detail, "connector": fallback}
            if line is None or not exc.artifact.startswith(_TOKEN_PROVIDER) or (
                    line.version != SPARK_VERSION):
                raise
            log.warning(
                "%s:%s is not on Maven Central here; using %s instead",
                exc.artifact, line.version, TOKEN_PROVIDER_FALLBACK,
            )
            _download_all(tuple((g, a, TOKEN_PROVIDER_FALLBACK if a == exc.artifact else v)
                                for g, a, v in artifacts), tmp)
            detail["token_provider"] = TOKEN_PROVIDER_FALLBACK
        _replace_dir(tmp, cache / name)
    except OSError as exc:
        raise EnvironmentFailure(
            f"could not download jars from {MAVEN_CENTRAL} ({exc}); install Maven (`mvn`) "
            "or allow HTTPS access to Maven Central"
        ) from exc
    return detail


class _NotFound(OSError):
    """An artifact Maven Central does not serve (404): an ``OSError`` like every other
    download failure, told apart where a fallback version exists."""

    def __init__(self, artifact: str, url: str) -> None:
        super().__init__(f"{url} was not found")
        self.artifact = artifact


def _download_all(artifacts: Sequence[tuple[str, str, str]], out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        for fut in [pool.submit(_download, g, a, v, out) for g, a, v in artifacts]:
            fut.result()


def _download(group: str, artifact: str, version: str, out: Path) -> Path:
    name = f"{artifact}-{version}.jar"
    url = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{name}"
    try:
        expected = _fetch(url + ".sha1").decode().split()[0].strip().lower()
        data = _fetch(url)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise _NotFound(artifact, url) from exc
        raise
    actual = hashlib.sha1(data).hexdigest()
    if actual != expected:
        raise OSError(f"SHA-1 mismatch for {url}: expected {expected}, got {actual}")
    return write_public(out / name, data)


def _fetch(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "pgval"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return bytes(resp.read())
