"""Settings of pgval's Kafka clients: librdkafka kept quiet, a login file, a Java client's login.

Shared by the broker (its start-up wait), the admin and the reader, and by the Spark driver
(whose Kafka source and sink are Java clients): one translation of a login for both kinds
of client, so Spark and pgval always reach a cluster as the same user.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pgval.core.errors import EnvironmentFailure
from pgval.core.files import key_value_lines, split_key_value


class _NullLogger:
    """Swallows librdkafka log lines (a ``logging.Logger``-like sink)."""

    def log(self, *_args: object, **_kwargs: object) -> None:
        return None


def quiet_conf(bootstrap: str, config: Mapping[str, object] | None = None
               ) -> dict[str, object]:
    """librdkafka logs every refused connection; those are expected while a broker starts
    or a fault is on, and pgval says what went wrong itself, in one sentence.
    ``config``: more client settings (a cluster's login)."""
    return {"bootstrap.servers": bootstrap, "log_level": 0, "logger": _NullLogger(),
            **(config or {})}


def read_client_properties(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (``#`` comments and blank lines skipped) into a dict."""
    out = {}
    for number, line in key_value_lines(Path(path).read_text()):
        pair = split_key_value(line)
        if pair is None:
            raise EnvironmentFailure(f"{path}: line {number} is not KEY=VALUE")
        out[pair[0]] = pair[1].strip()
    return out


def java_client_options(config: Mapping[str, str]) -> dict[str, str]:
    """librdkafka client settings as a Java Kafka client's (Spark's source and sink): the
    user name and password become ``sasl.jaas.config`` for a SCRAM or PLAIN mechanism
    (unless one is given); everything else passes unchanged. The password stays in memory
    and the JVM's config (which Kafka logs as ``[hidden]``)."""
    out = dict(config)
    mechanism = str(out.get("sasl.mechanism", out.get("sasl.mechanisms", "PLAIN"))).upper()
    if mechanism != "PLAIN" and not mechanism.startswith("SCRAM-"):
        return out  # GSSAPI, OAUTHBEARER: no user name and password to translate
    user, password = out.pop("sasl.username", None), out.pop("sasl.password", None)
    if user is None and password is None:
        return out
    out.pop("sasl.mechanisms", None)
    out["sasl.mechanism"] = mechanism
    module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
              if mechanism.startswith("SCRAM-")
              else "org.apache.kafka.common.security.plain.PlainLoginModule")
    out.setdefault("sasl.jaas.config", f"{module} required username={jaas_quote(user or '')} "
                                       f"password={jaas_quote(password or '')};")
    return out


def jaas_quote(value: str) -> str:
    """A JAAS option value, quoted (the broker's login settings use it too)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
