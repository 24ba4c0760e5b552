"""Small Java sources of pgval's, compiled once with the JDK's ``javac`` into the jar cache.

pgval ships a few Java classes as source (the Spark hooks of the crash points, the bulk
Kafka reader) rather than as built jars: each is compiled against the very jars that run
it, on first use, into ``<cache>/<name>-<digest>.jar``. The digest covers the sources and
whatever else the caller says decides the build (a Spark version), so a change builds a
new jar and nothing stale is ever loaded. A file lock keeps parallel runs from building
twice; a missing JDK is one plain sentence.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from pgval.core.errors import EnvironmentFailure
from pgval.core.files import open_public, write_public
from pgval.host.procs import file_lock


def find_javac() -> str | None:
    """``$JAVA_HOME/bin/javac`` (the JDK Spark runs on, as ``java_executable``) or PATH's."""
    java_home = os.environ.get("JAVA_HOME")
    home_javac = Path(java_home) / "bin" / "javac" if java_home else None
    if home_javac is not None and home_javac.is_file():
        return str(home_javac)
    return shutil.which("javac")


def jar_path(cache: Path, name: str, sources: Mapping[str, str], salt: bytes = b"") -> Path:
    """Where the jar of these sources (file name → text) is cached."""
    digest = hashlib.sha256(salt)
    for file_name, text in sorted(sources.items()):
        digest.update(file_name.encode() + b"\0" + text.encode())
    return cache / f"{name}-{digest.hexdigest()[:16]}.jar"


def build_jar(cache: Path, name: str, sources: Mapping[str, str], classpath: str,
              purpose: str, salt: bytes = b"") -> Path:
    """The jar of ``sources`` compiled against ``classpath``, built on first use.

    ``purpose`` names what needs it in the error sentences ("the crash points").
    """
    jar = jar_path(cache, name, sources, salt)
    if jar.is_file():
        return jar
    javac = find_javac()
    if javac is None:
        raise EnvironmentFailure(f"{purpose} need javac (a JDK, not only a JRE) to build "
                                f"pgval's {name}; install e.g. openjdk-17-jdk-headless")
    cache.mkdir(parents=True, exist_ok=True)
    with file_lock(cache / f".{name}.lock"):
        if jar.is_file():  # another process built it meanwhile
            return jar
        with tempfile.TemporaryDirectory(prefix=f"pgval-{name}-") as tmp:
            classes, src = Path(tmp) / "classes", Path(tmp) / "src"
            src.mkdir()
            files = []
            for file_name, text in sorted(sources.items()):
                write_public(src / file_name, text)
                files.append(str(src / file_name))
            try:
                proc = subprocess.run(
                    [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes),
                     *files], capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise EnvironmentFailure(f"javac could not build pgval's {name}: {exc}") from exc
            if proc.returncode != 0:
                raise EnvironmentFailure(f"javac could not build pgval's {name}: "
                                        + (proc.stderr.strip().splitlines() or ["?"])[0])
            with open_public(jar) as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
                zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
                for cls in sorted(classes.rglob("*.class")):
                    zf.write(cls, cls.relative_to(classes).as_posix())
    return jar
