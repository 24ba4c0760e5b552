"""Nothing secret stored or logged, offline: the redaction rules, every
place a run's settings are stored (run.json, ``runs.params``, the fault log, the OIR
shape, the driver's conf line), the nemesis's log and errors, and file modes.

The real runs in tests/test_validate.py (a local run with a secret ``--spark-conf``) and
tests/test_deploy_cluster.py (an external run with a secret ``--kafka-config``,
``--spark-conf`` and nemesis) grep every file they leave and the database for the markers.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from pgval.campaigns.oir import shape_matches
from pgval.core.errors import PgvalError
from pgval.core.redact import (
    REDACTED,
    conf_summary,
    private_dir,
    private_umask,
    redact_command,
    redact_record,
    scrub,
    secret_key,
)
from pgval.core.spec import RunSpec
from pgval.evidence.bundle import MANIFEST, Manifest, evidence_dir
from pgval.faults.nemesis import NemesisDelay
from pgval.store.results import ResultsStore

MARK = "hunter2-MARKER-7f3a"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("name", [
    "sasl.password", "SASL.PASSWORD", "ssl.key.password", "ssl.keystore.password",
    "ssl.truststore.password", "sasl.jaas.config", "spark.authenticate.secret",
    "spark.authenticate.secret.file", "fs.s3a.secret.key", "fs.s3a.access.key",
    "ssl.keystore.key", "api_key", "apiKey", "secretAccessKey", "auth-token", "PGPASSWORD",
    "sasl.oauthbearer.client.credentials.client.secret", "my_credentials", "PGPASSWD"])
def test_secret_names(name: str) -> None:
    assert secret_key(name)


@pytest.mark.parametrize("name", [
    "matrix_key", "key", "keep_data", "keep_topics", "spark.authenticate", "bootstrap",
    "sasl.mechanism", "security.protocol", "topic_prefix", "window_ms", "run_dir",
    "partition_key", "spark.sql.shuffle.partitions", "tokenizer_count", "passes",
    "oir_trial"])
def test_names_that_are_not_secret(name: str) -> None:
    """pgval's own fields (``matrix_key``: matrices are found by it) stay readable."""
    assert not secret_key(name)


def secret_config() -> RunSpec:
    return RunSpec(
        deploy="external", bootstrap="kafka:9092", master=f"spark://admin:{MARK}@m:7077",
        kafka_config={"sasl.password": MARK, "client.id": f"plain-{MARK}"},
        spark_conf={"spark.executor.extraJavaOptions": f"-Dpass={MARK}",
                    "spark.pgval.test.password": MARK},
        nemesis_inject=f"tc-tool --token {MARK} on {{worker}}",
        nemesis_remove=f"tc-tool '--token={MARK}' off {{worker}}",
        fault="delay-lt-timeout")


def test_to_record_keeps_keys_and_redacts_every_user_value() -> None:
    cfg = secret_config()
    stored = cfg.to_record()
    text = json.dumps(stored)
    assert MARK not in text
    assert stored["kafka_config"] == {"sasl.password": REDACTED, "client.id": REDACTED}
    assert stored["spark_conf"] == {"spark.executor.extraJavaOptions": REDACTED,
                                    "spark.pgval.test.password": REDACTED}
    assert stored["nemesis_inject"] == "tc-tool '<redacted>' '<redacted>' '<redacted>' " \
                                       "'<redacted>'"
    assert stored["master"] == "spark://<redacted>@m:7077"
    # What is not secret is as it was; the config itself keeps the real values.
    assert (stored["fault"], stored["bootstrap"], stored["rate"]) == (
        "delay-lt-timeout", "kafka:9092", 2000.0)
    assert cfg.kafka_config["sasl.password"] == MARK
    assert redact_record(stored) == stored  # idempotent: stored twice is stored once


def test_redact_record_walks_nested_records() -> None:
    record = {"a": [{"ssl.key.password": MARK, "n": 1}], "token": None,
              "url": f"sasl_ssl://u:{MARK}@h:1", "sub": {"Secret": {"x": MARK}}}
    out = redact_record(record)
    assert MARK not in json.dumps(out)
    assert out["a"][0] == {"ssl.key.password": REDACTED, "n": 1}
    assert out["token"] is None  # nothing there: nothing to hide, and it says so
    assert out["sub"] == {"Secret": REDACTED}
    assert redact_command("x 'unclosed") == REDACTED
    assert redact_command("") == ""


def test_store_redacts_params_and_fault_log_whatever_the_caller_passes(
        tmp_path: Path) -> None:
    """The store is the last gate: a caller that forgot to_record() still stores no secret."""
    db = tmp_path / "r.db"
    store = ResultsStore(db)
    run_id = store.start_run("validate", "sst", 1000, params={
        "kafka_config": {"sasl.password": MARK}, "matrix_key": "abc123"})
    store.set_params(run_id, {"spark_conf": {"k": MARK}, "matrix_key": "abc123",
                              "nested": {"sasl.jaas.config": MARK}})
    store.save_fault_log(run_id, [{"step": "inject", "fault": "delay-lt-timeout",
                                   "detail": {"password": MARK}}])
    assert store.run(run_id)["params"].count("abc123") == 1  # a matrix still finds its runs
    store.close()
    con = sqlite3.connect(db)
    rows = con.execute("select params from runs union all select detail from fault_log")
    assert all(MARK not in r[0] for r in rows)
    con.close()
    assert MARK.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())


def test_a_finished_runs_summary_holds_no_secret(tmp_path: Path) -> None:
    """finish_run's extra (timings, generator, fault log, the deployment's description)
    goes into runs.summary: redacted there too."""
    from tests.test_report import synthetic_run

    ev, _ = synthetic_run("none", 1)
    store = ResultsStore(tmp_path / "r.db")
    run_id = store.start_run("validate", "sst", 1000)
    log = [{"step": "inject", "fault": "delay-lt-timeout", "ssl.key.password": MARK}]
    store.finish_run(run_id, ev, extra={"fault_log": log, "cluster": {"token": MARK}},
                     fault_log=log)
    row = store.run(run_id)
    assert row["status"] == "complete" and MARK not in row["summary"]
    assert json.loads(row["summary"])["cluster"] == {"token": REDACTED}
    store.close()
    assert files_holding(MARK, tmp_path) == []


def test_a_new_database_is_0600_and_a_users_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    store = ResultsStore(db)
    store.start_run("check", "sst", 1000)
    assert mode(db) == 0o600
    for side in ("-wal", "-shm"):  # SQLite gives them the database's mode
        assert mode(Path(f"{db}{side}")) == 0o600, side
    store.close()
    theirs = tmp_path / "theirs.db"
    sqlite3.connect(theirs).close()
    theirs.chmod(0o644)
    ResultsStore(theirs).close()
    assert mode(theirs) == 0o644


def test_run_json_is_0600_and_redacted(tmp_path: Path) -> None:
    m = Manifest(topology="sst", window_ms=1000, phases=[0, 1, 2],
                 config={**secret_config().to_record(), "late": {"token": MARK}})
    m.config["kafka_config"] = {"sasl.password": MARK}  # added after to_record, as a run does
    evidence_dir(tmp_path).mkdir()
    (evidence_dir(tmp_path) / "run.tmp").write_text("left over")
    (evidence_dir(tmp_path) / "run.tmp").chmod(0o644)
    path = m.write(tmp_path)
    assert path.name == MANIFEST and mode(path) == 0o600
    assert MARK not in path.read_text()
    assert Manifest.read(tmp_path).config["kafka_config"] == {"sasl.password": REDACTED}


def test_nemesis_log_and_errors_keep_only_the_program(tmp_path: Path) -> None:
    """The commands really run with their arguments (the log file shows them), yet the
    fault log entries and the failure messages hold no argument, nor its echo."""
    log = tmp_path / "log"
    py = sys.executable
    echo = (f"{py} -c \"import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + "
            f"chr(10)); print('token was', sys.argv[2])\"")
    fault = NemesisDelay("delay-lt-timeout", f"{echo} {log} {MARK} on {{worker}}",
                         f"{echo} {log} {MARK} off {{worker}}", worker=1, delay_ms=500)
    entries = [fault.inject(), fault.remove()]
    assert log.read_text().splitlines() == [f"{MARK} on 1", f"{MARK} off 1"]
    assert MARK not in json.dumps(entries)
    assert entries[0]["argv"] == [py, *[REDACTED] * 6]  # -c, code, log, mark, on, 1
    assert "token was <redacted>" in entries[0]["output_tail"]
    failing = NemesisDelay("delay-lt-timeout",
                           f"{py} -c 'import sys; print(sys.argv[1]); sys.exit(3)' {MARK}",
                           "true", worker=0, delay_ms=500)
    with pytest.raises(PgvalError, match="exit 3") as err:
        failing.inject()
    assert MARK not in str(err.value)
    for bad in (f"tool --token={MARK} '", f"tool --token={MARK} {{host}}"):
        with pytest.raises(PgvalError) as err:
            NemesisDelay("delay-lt-timeout", bad, "true", worker=0, delay_ms=500)
        assert MARK not in str(err.value)


def test_scrub_leaves_short_arguments() -> None:
    assert scrub(f"worker 1 said {MARK}", ["1", MARK]) == "worker 1 said <redacted>"


def test_driver_conf_line_shows_keys_only_for_given_and_secret_settings() -> None:
    conf = {"spark.master": "spark://m:7077", "spark.authenticate.secret": MARK,
            "spark.pgval.x": MARK, "spark.sql.shuffle.partitions": "3"}
    assert conf_summary(conf, ["spark.pgval.x"]) == {
        "spark.master": "spark://m:7077", "spark.authenticate.secret": REDACTED,
        "spark.pgval.x": REDACTED, "spark.sql.shuffle.partitions": "3"}


def test_the_oir_shape_tells_settings_apart_without_holding_them() -> None:
    a = secret_config().shape().oir()
    assert MARK not in json.dumps(a)
    b = RunSpec(**{**vars(secret_config()), "spark_conf": {
        "spark.executor.extraJavaOptions": "-Dpass=other",
        "spark.pgval.test.password": MARK}}).shape().oir()
    assert not shape_matches(a, b)  # a different value is a different shape
    assert shape_matches(a, secret_config().shape().oir())


def test_private_dir_and_umask(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir(mode=0o755)
    user.chmod(0o755)
    made = private_dir(user / "runs" / "run-1")
    assert (mode(user), mode(user / "runs"), mode(made)) == (0o755, 0o700, 0o700)
    before = os.umask(0o022)
    try:
        with private_umask():
            (made / "f").write_text("x")
        (made / "g").write_text("x")
        assert os.umask(0o022) == 0o022  # the caller's umask is back
    finally:
        os.umask(before)
    assert (mode(made / "f"), mode(made / "g")) == (0o600, 0o644)


# --------------------------------------------------------------------------- real runs


def files_holding(marker: str, *roots: Path) -> list[str]:
    """Every file under ``roots`` whose bytes hold ``marker`` (binary-safe; a database's
    ``-wal`` included when it is still there). Compressed files (Parquet evidence, Kafka
    segments) are searched as stored: they hold records, not settings."""
    needle = marker.encode()
    hits = []
    for root in roots:
        paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in paths:
            try:
                if needle in path.read_bytes():
                    hits.append(str(path))
            except OSError:  # a socket, or a file gone meanwhile
                continue
    return hits


def assert_private_run(run_dir: Path, db: Path) -> None:
    """The run's directory 0700, the evidence and the database 0600."""
    assert mode(run_dir) == 0o700, oct(mode(run_dir))
    evidence = [p for p in evidence_dir(run_dir).iterdir() if p.is_file()]
    assert evidence and all(mode(p) == 0o600 for p in evidence), [
        (p.name, oct(mode(p))) for p in evidence]
    assert mode(db) == 0o600, oct(mode(db))


def test_the_matrix_key_holds_no_secret_and_still_tells_settings_apart() -> None:
    """A secret-named value does not change the key (it never enters it), any other
    setting does; a matrix without such settings keeps the key it always had (so a stored
    matrix still resumes): the hash of its plain config."""
    import hashlib

    from pgval.campaigns.matrix import matrix_key
    from pgval.core.shape import UNSET_OMITTED

    def key(**kw: object) -> str:
        return matrix_key(RunSpec(**kw))

    assert key(spark_conf={"x.password": "a"}) == key(spark_conf={"x.password": "b"})
    assert key(kafka_config={"sasl.password": "a"}) == key(kafka_config={"sasl.password": "b"})
    assert key(spark_conf={"x": "1"}) != key(spark_conf={"x": "2"})
    plain = {k: v for k, v in RunSpec(rate=5.0).settings().items()
             if k not in ("topology", "pg", "fault", "crash_point", "seed")
             and not (k in UNSET_OMITTED and v == UNSET_OMITTED[k])}  # as before they existed
    assert key(rate=5.0) == hashlib.sha256(
        json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:12]


def test_a_stored_error_message_holds_no_secret_value() -> None:
    """What `runs.error` gets when a run fails: the message without the user's values."""
    from pgval.core.spec import RunSpec

    cfg = RunSpec(topology="sst", kafka_config={"sasl.password": "pw-kafka-1"},
                           spark_conf={"spark.x.token": "tok-spark-2"},
                           nemesis_inject="nem --token tok-nem-3 {worker}",
                           nemesis_remove="nem --off 'tok nem 4")
    text = ("broker said pw-kafka-1; conf tok-spark-2; argv nem --token tok-nem-3; "
            "url http://u:pw-url-5@h/")
    out = cfg.scrubbed(text)
    assert not any(s in out for s in ("pw-kafka-1", "tok-spark-2", "tok-nem-3", "pw-url-5")), out
    assert out.startswith("broker said")
