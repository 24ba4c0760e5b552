"""`pgval generate` into a file and the errors of `generate`/`record`, offline; the Kafka
round trip (generate → another engine's outputs → record → check) is in
tests/test_kafka_runtime.py, on its broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgval.cli import main


def _generate(tmp_path: Path, name: str, *extra: str) -> list[dict]:
    out = tmp_path / name
    res = CliRunner().invoke(main, ["generate", "--out", str(out), "--rate", "0",
                                    "--events", "2000", "--resources", "4", *extra])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_generate_to_a_file_is_the_generators_sequence(tmp_path: Path) -> None:
    """IDs 0…N−1 once each; type and resource a function of the seed alone (the times are
    the wall clock's); the file is what `check --inputs` reads."""
    a = _generate(tmp_path, "a.jsonl", "--seed", "7")
    b = _generate(tmp_path, "b.jsonl", "--seed", "7")
    c = _generate(tmp_path, "c.jsonl", "--seed", "8")
    assert [e["id"] for e in a] == list(range(2000))
    assert {e["resource"] for e in a} == {"r0000", "r0001", "r0002", "r0003"}
    assert all(e["ingress_ts"] >= e["event_ts"] for e in a)
    strip = [[(e["type"], e["resource"]) for e in run] for run in (a, b, c)]
    assert strip[0] == strip[1] and strip[0] != strip[2]
    gets = sum(e["type"] == "GET" for e in a)
    assert 1960 <= gets < 2000  # P(GET) = 0.995: about 10 POSTs


@pytest.mark.parametrize(("args", "says"), [
    ([], "say where the events go"),
    (["--out", "x.jsonl", "--bootstrap", "h:1", "--events", "5"], "say where the events go"),
    (["--out", "x.jsonl"], "say when to stop"),
    (["--out", "x.jsonl", "--events", "5", "--topic-prefix", "p-"], "are for --bootstrap"),
    (["--out", "x.jsonl", "--events", "0"], "--events"),
])
def test_generate_refuses_an_unclear_order_in_one_sentence(tmp_path: Path, args: list[str],
                                                            says: str) -> None:
    res = CliRunner().invoke(main, ["generate", *args])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output


def test_record_from_no_broker_is_one_sentence_and_writes_nothing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pgval.cli", "record", "--bootstrap", "127.0.0.1:9",
         "--inputs", "get,post", "--outputs", "output", "--out", str(tmp_path / "rec"),
         "--timeout-s", "3"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4, proc.stderr  # the environment
    assert proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize(("inputs", "outputs", "says"), [
    ("a,a", "out", "an input topic is named twice"),
    ("a,out", "out", "topic out is both an input and the output"),
    ("a,b,c", "out", "at most 2 input topics"),
    (",", "out", "name the input topics and the output topic"),
])
def test_record_refuses_topics_it_cannot_record_together(tmp_path: Path, inputs: str,
                                                         outputs: str, says: str) -> None:
    res = CliRunner().invoke(main, ["record", "--bootstrap", "127.0.0.1:9", "--inputs", inputs,
                                    "--outputs", outputs, "--out", str(tmp_path / "rec")])
    assert res.exit_code == 2 and says in res.output, res.output
    assert not (tmp_path / "rec").exists()
