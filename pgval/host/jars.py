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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pgval.errors import RuntimeErrorPlain
from pgval.host.procs import file_lock, spawn

log = logging.getLogger(__name__)

POM_PATH = Path(__file__).with_name("pom.xml")
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
MIN_JAVA = 17
SPARK_VERSION = "4.2.0"
#: Used when a mirror lacks spark-token-provider-kafka-0-10 for SPARK_VERSION. Every member it
#: references resolves against pyspark 4.2.0's jars except two log keys used only while fetching
#: Kerberos delegation tokens, which pgval never does.
TOKEN_PROVIDER_FALLBACK = "4.1.0-preview1"
_TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
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

#: The spark profile's jars: only what pyspark's own jars directory lacks.
SPARK_ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("org.apache.spark", "spark-sql-kafka-0-10_2.13", SPARK_VERSION),
    ("org.apache.spark", _TOKEN_PROVIDER, SPARK_VERSION),
    ("org.apache.kafka", "kafka-clients", "3.9.2"),
    ("org.apache.commons", "commons-pool2", "2.13.1"),
)


@dataclass(frozen=True)
class Jars:
    """Resolved jar paths: the broker's classpath and the jars to add to Spark."""

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
        raise RuntimeErrorPlain(
            f"Java {min_version} or newer is required but `java` was not found on PATH"
        )
    with tempfile.TemporaryDirectory(prefix="pgval-java-") as tmp:
        out = _run("java-version", [java, "-version"], Path(tmp) / "java.log", timeout_s=60)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        raise RuntimeErrorPlain(f"could not tell the Java version from `{java} -version`")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < min_version:
        raise RuntimeErrorPlain(
            f"Java {min_version} or newer is required but `{java}` is Java {major}"
        )
    return major


def ensure_jars(cache_dir: Path | None = None) -> Jars:
    """Resolve the broker and connector jars into ``cache_dir`` once; later calls just list them."""
    cache = (cache_dir or default_cache_dir()).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    pom_hash = hashlib.sha256(POM_PATH.read_bytes()).hexdigest()
    jars = _cached(cache, pom_hash)
    if jars is not None:
        return jars
    with _locked(cache / ".lock"):
        jars = _cached(cache, pom_hash)  # another process may have finished meanwhile
        if jars is not None:
            return jars
        (cache / _STAMP).unlink(missing_ok=True)
        mvn = shutil.which("mvn")
        if mvn is not None:
            detail = _resolve_with_maven(mvn, cache)
        else:
            log.info("mvn not found; downloading jars from Maven Central directly")
            detail = _resolve_direct(cache)
        stamp = {"pom_sha256": pom_hash, **detail}
        (cache / _STAMP).write_text(json.dumps(stamp, indent=1))
    jars = _cached(cache, pom_hash)
    if jars is None:  # pragma: no cover - only if the cache was changed under us
        raise RuntimeErrorPlain(f"the jar cache {cache} is incomplete; delete it and retry")
    return jars


def _cached(cache: Path, pom_hash: str) -> Jars | None:
    stamp = cache / _STAMP
    try:
        info = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None
    if info.get("pom_sha256") != pom_hash:
        return None
    broker = sorted((cache / "broker").glob("*.jar"))
    spark = sorted((cache / "spark").glob("*.jar"))
    if not broker or not spark:
        return None
    return Jars(kafka_classpath=broker, spark_kafka_jars=spark)


_locked = file_lock


def _run(name: str, argv: Sequence[str], log_path: Path, timeout_s: float) -> str:
    """Run a short-lived command in its own process group; return its output or raise."""
    log_path.unlink(missing_ok=True)
    proc = spawn(name, argv, log_path)
    try:
        code = proc.popen.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeErrorPlain(
            f"{name} did not finish within {timeout_s:.0f} s; see {log_path}"
        ) from exc
    finally:
        proc.stop(grace_s=2.0)
    out = log_path.read_text(errors="replace") if log_path.exists() else ""
    if code != 0:
        raise _CommandFailed(name, code, out, log_path)
    return out


class _CommandFailed(RuntimeErrorPlain):
    def __init__(self, name: str, code: int, output: str, log_path: Path) -> None:
        super().__init__(f"{name} failed with exit code {code}; see {log_path}")
        self.output = output


def _resolve_with_maven(mvn: str, cache: Path) -> dict[str, str]:
    """``mvn dependency:copy-dependencies`` once per profile, into fresh directories."""
    detail = {"method": "maven", "token_provider": SPARK_VERSION}
    _maven_copy(mvn, cache, "broker", [])
    try:
        _maven_copy(mvn, cache, "spark", [])
    except _CommandFailed as exc:
        if _TOKEN_PROVIDER not in exc.output:
            raise
        log.warning(
            "%s:%s is not available from this Maven repository; using %s instead",
            _TOKEN_PROVIDER, SPARK_VERSION, TOKEN_PROVIDER_FALLBACK,
        )
        override = f"-Dspark.token.provider.version={TOKEN_PROVIDER_FALLBACK}"
        _maven_copy(mvn, cache, "spark", [override])
        detail["token_provider"] = TOKEN_PROVIDER_FALLBACK
    return detail


def _maven_copy(mvn: str, cache: Path, profile: str, extra: list[str]) -> None:
    tmp = cache / f"{profile}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = [
        mvn, "-q", "-B", "-f", str(POM_PATH), f"-P{profile}",
        "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", *extra,
    ]
    try:
        _run(f"mvn-{profile}", argv, cache / f"mvn-{profile}.log", timeout_s=1800)
    except FileNotFoundError as exc:  # pragma: no cover - spawn already maps this
        raise RuntimeErrorPlain("Maven (`mvn`) vanished while resolving jars") from exc
    _replace_dir(tmp, cache / profile)


def _replace_dir(tmp: Path, final: Path) -> None:
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def _resolve_direct(cache: Path) -> dict[str, str]:
    """Download the fixed artifact lists from Maven Central, verifying each ``.sha1``."""
    detail = {"method": "direct", "token_provider": SPARK_VERSION}
    try:
        _download_all(BROKER_ARTIFACTS, cache / "broker.tmp")
        _replace_dir(cache / "broker.tmp", cache / "broker")
        try:
            _download_all(SPARK_ARTIFACTS, cache / "spark.tmp")
        except _NotFound as exc:
            if exc.artifact != _TOKEN_PROVIDER:
                raise
            log.warning(
                "%s:%s is not on Maven Central here; using %s instead",
                _TOKEN_PROVIDER, SPARK_VERSION, TOKEN_PROVIDER_FALLBACK,
            )
            fallback = tuple(
                (g, a, TOKEN_PROVIDER_FALLBACK if a == _TOKEN_PROVIDER else v)
                for g, a, v in SPARK_ARTIFACTS
            )
            _download_all(fallback, cache / "spark.tmp")
            detail["token_provider"] = TOKEN_PROVIDER_FALLBACK
        _replace_dir(cache / "spark.tmp", cache / "spark")
    except OSError as exc:
        raise RuntimeErrorPlain(
            f"could not download jars from {MAVEN_CENTRAL} ({exc}); install Maven (`mvn`) "
            "or allow HTTPS access to Maven Central"
        ) from exc
    return detail


class _NotFound(OSError):
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
    dest = out / name
    dest.write_bytes(data)
    return dest


def _fetch(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "pgval"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return bytes(resp.read())
