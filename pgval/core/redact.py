"""Nothing secret stored or logged: values replaced, keys kept; run files private.

Why: a run's configuration goes into ``evidence/run.json`` and SQLite (``runs.params``),
its fault log into SQLite, the driver's settings into ``progress.jsonl``: files that outlive
the run, get copied, attached to bug reports. The user's settings may hold secrets
(``--kafka-config sasl.password=…``, a ``--spark-conf`` token, a nemesis command line with
an API token), so what pgval stores says *which* settings were given, never their values:

* every value of ``kafka_config`` and ``spark_conf`` (a value need not be named like a
  secret to hold one: ``spark.executor.extraJavaOptions=-Dpass=…``);
* every argument of a nemesis command but the program (``argv[0]``): a token can sit
  anywhere on a command line, and the program tells which tool ran;
* anywhere else, the value of any key named like a secret (:func:`secret_key`), and the
  ``user:password@`` part of a URL.

Stdlib only, so every layer can import it (the driver too). Files: :func:`private_dir`
creates directories 0700 and :func:`private_umask` makes what a run writes 0600.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"

#: Config fields whose every value is redacted (the user's settings, passed through).
ALL_VALUES = ("kafka_config", "spark_conf")
#: Config fields holding a nemesis command line (a template split like a shell would).
COMMANDS = ("nemesis_inject", "nemesis_remove")

#: Inside any word of a name, these make it secret (``PGPASSWORD``, ``keystorepassword``).
_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "credential")
#: As a whole word of a name, these do (``auth-token``, not ``tokenizer``).
_SECRET_WORDS = frozenset({"pwd", "token", "tokens", "apikey", "jaas", "privatekey", "sas"})
#: ``key`` is secret after one of these (``ssl.keystore.key``, ``fs.s3a.access.key``,
#: ``api_key``), not alone: pgval's own ``matrix_key`` is not a secret.
_KEY_AFTER = frozenset({"access", "secret", "private", "api", "ssl", "keystore", "signing",
                        "encryption", "account", "client", "master", "session", "auth"})
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def _words(name: str) -> list[str]:
    """``sasl.jaas.config`` → sasl, jaas, config; ``secretAccessKey`` → secret, access, key."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return re.findall(r"[a-z0-9]+", spaced.lower())


def secret_key(name: str) -> bool:
    """Whether a setting named ``name`` holds a secret (case-insensitive, by its words: one
    containing password, passwd, passphrase, secret, credential; one that is token, pwd,
    jaas, apikey, …; ``key`` after access/secret/private/api/ssl/keystore/…)."""
    words = _words(name)
    if any(w in _SECRET_WORDS or any(p in w for p in _SECRET_PARTS) for w in words):
        return True
    return any(w == "key" and i > 0 and words[i - 1] in _KEY_AFTER
               for i, w in enumerate(words))


def redact_values(settings: Mapping[str, Any] | None) -> dict[str, str]:
    """Every key kept, every value replaced."""
    return {str(k): REDACTED for k in (settings or {})}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The program kept, every argument replaced (one placeholder per argument)."""
    return [*argv[:1], *(REDACTED for _ in argv[1:])]


def redact_command(template: str | None) -> str | None:
    """A nemesis command line with only its program left: ``tc-tool <redacted> ×3``."""
    if not template:
        return template
    try:
        argv = shlex.split(template)
    except ValueError:  # cannot be split: nothing of it can be told apart from a secret
        return REDACTED
    return shlex.join(redact_argv(argv)) if argv else template


def redact_url(text: str) -> str:
    """``sasl://user:pw@host`` → ``sasl://<redacted>@host``; other text unchanged."""
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


def redact_record(value: Any) -> Any:
    """A copy of a record (dicts, lists, scalars) fit to store: see the module docstring."""
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            name = str(k)
            if name in ALL_VALUES and isinstance(v, Mapping):
                out[k] = redact_values(v)
            elif name in COMMANDS and isinstance(v, str):
                out[k] = redact_command(v)
            elif secret_key(name) and v not in (None, "", {}, []):
                out[k] = REDACTED
            else:
                out[k] = redact_record(v)
        return out
    if isinstance(value, (list, tuple)):
        return [redact_record(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def scrub(text: str, secrets: Sequence[str], min_len: int = 4) -> str:
    """``text`` with every occurrence of each of ``secrets`` (at least ``min_len`` long:
    shorter ones, a worker index or a delay, say nothing and would garble the text)
    replaced; for a command's output that may echo its arguments."""
    for secret in sorted({s for s in secrets if len(s) >= min_len}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def conf_summary(conf: Mapping[str, str], user_keys: Sequence[str] = ()) -> dict[str, str]:
    """Spark settings fit to log: values of the user's keys and of secret-named keys
    replaced, pgval's own kept (they say how the query ran)."""
    given = set(user_keys)
    return {k: (REDACTED if k in given or secret_key(k) else v) for k, v in conf.items()}


def digest_values(settings: Mapping[str, Any] | None) -> dict[str, str]:
    """Settings that can still be told apart, not read: a secret-named key's value
    replaced (it cannot change a rate), every other value by the start of its SHA-256
    (for a run shape: two shapes differ when a value differs)."""
    return {str(k): REDACTED if secret_key(str(k)) else
            "sha256:" + hashlib.sha256(str(v).encode()).hexdigest()[:12]
            for k, v in (settings or {}).items()}


# --------------------------------------------------------------------------- files


def private_dir(path: Path | str) -> Path:
    """``mkdir -p`` in which every directory created is 0700 whatever the umask; those that
    existed are left as they are (a user's folder keeps its mode)."""
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            # Made meanwhile: fine if it is ours and closed, else someone planted it.
            st = os.lstat(folder)
            if (not os.path.isdir(folder) or os.path.islink(folder)
                    or st.st_uid != os.geteuid() or st.st_mode & 0o022):
                raise PermissionError(f"{folder} appeared while pgval was creating it and is "
                                      "not a private directory of this user") from None
            continue
        os.chmod(folder, 0o700)  # mkdir's mode went through the umask
    return path


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """umask 077 while a run writes (its files 0600, its folders 0700, those of the
    processes it starts too), the caller's umask back afterwards. The umask is the
    process's: use it around a run, not around a command writing a user's files."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
