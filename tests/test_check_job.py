"""``pgval check --job``: a user's job judged on recorded streams, offline, by its batch run
over the recorded inputs (local Spark): each planted anomaly found as what it is, values
included, and what cannot be judged refused in one sentence."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgval.cli import main

ROOT = Path(__file__).resolve().parent.parent
JOB = f"{ROOT / 'examples' / 'jobs' / 'per_type_window.py'}:build"
ORDERS = f"{ROOT / 'examples' / 'jobs' / 'orders.py'}:build"
T0 = 1_700_000_000_000  # a multiple of 5 s
WINDOW = 5_000


def _iso(ms: int) -> str:
    """A timestamp as Spark's to_json writes it in a UTC session."""
    when = datetime.fromtimestamp(ms / 1000, timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _files(tmp_path: Path) -> tuple[Path, list[dict]]:
    """60 events, one every 250 ms (a POST every tenth), and per_type_window.py's right
    outputs: per 5 s window and type, the count and the IDs, each written 1 s after its
    window closed."""
    events = [{"id": i, "type": "POST" if i % 10 == 9 else "GET", "resource": f"r{i % 3:04d}",
               "event_ts": T0 + 250 * i, "ingress_ts": T0 + 250 * i + 10} for i in range(60)]
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps(e) + "\n" for e in events))
    cells: dict[tuple[int, str], list[int]] = {}
    for e in events:
        cells.setdefault((e["event_ts"] // WINDOW * WINDOW, e["type"]), []).append(e["id"])
    outputs = [{"window_start": _iso(w), "window_end": _iso(w + WINDOW), "type": t,
                "n": len(ids), "ids": ids, "ingress_ts": w + WINDOW + 1000}
               for (w, t), ids in sorted(cells.items())]
    return inputs, outputs


def _check(tmp_path: Path, inputs: Path, outputs: list[dict], *extra: str):  # noqa: ANN202
    path = tmp_path / "out.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in outputs))
    res = CliRunner().invoke(main, ["check", "--job", JOB, "--inputs", str(inputs),
                                    "--outputs", str(path), "--window-ms", "5000", "--json",
                                    *extra])
    assert "Traceback" not in res.output
    return res


def test_the_docs_example_is_exactly_once_values_included(tmp_path: Path) -> None:
    """docs/your-job.md's command on the example's recorded files, which are these."""
    inputs, outputs = _files(tmp_path)
    recorded = ROOT / "examples" / "recorded"
    assert (recorded / "per_type_window-in.jsonl").read_text() == inputs.read_text()
    out = recorded / "per_type_window-out.jsonl"
    assert [json.loads(line) for line in out.read_text().splitlines()] == outputs
    res = CliRunner().invoke(main, ["check", "--job", JOB, "--inputs",
                                    str(recorded / "per_type_window-in.jsonl"), "--outputs",
                                    str(out), "--window-ms", "5000", "--expect",
                                    "exactly-once", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert (s["guarantee"], s["expected"], s["valid"]) == ("exactly-once", 60, True)
    assert s["values"]["compared_outputs"] == len(outputs) and s["values"]["wrong_outputs"] == 0


def test_a_wrong_count_and_a_duplicate_are_found_as_what_they_are(tmp_path: Path) -> None:
    inputs, outputs = _files(tmp_path)
    outputs[0]["n"] += 1                               # the right IDs, a wrong count
    outputs.append(dict(outputs[1], ingress_ts=outputs[1]["ingress_ts"] + 500))  # twice
    res = _check(tmp_path, inputs, outputs, "--expect", "at-least-once")
    assert res.exit_code == 1, res.output
    s = json.loads(res.stdout)
    assert s["guarantee"] == "none"
    assert s["values"]["wrong_outputs"] == 1
    assert s["values"]["wrong_value"] == len(outputs[0]["ids"]) == s["incorrect"]
    assert s["duplicate"] == len(outputs[1]["ids"])
    assert s["unprocessed"] == len(outputs[0]["ids"])  # its IDs not processed by it


def test_what_check_job_cannot_judge_is_one_sentence(tmp_path: Path) -> None:
    inputs, outputs = _files(tmp_path)
    runner = CliRunner()
    both = runner.invoke(main, ["check", "--job", JOB, "--topology", "sst", "--inputs",
                                str(inputs), "--outputs", str(inputs)])
    assert both.exit_code == 2 and "exclude each other" in both.output
    neither = runner.invoke(main, ["check", "--inputs", str(inputs), "--outputs",
                                   str(inputs)])
    assert neither.exit_code == 2 and "give --topology sst|mst, or --job" in neither.output
    missing = runner.invoke(main, ["check", "--job", f"{tmp_path / 'none.py'}:build",
                                   "--inputs", str(inputs), "--outputs", str(inputs)])
    assert missing.exit_code == 2 and "no such file" in missing.output
    kafka = runner.invoke(main, ["check", "--job", ORDERS, "--inputs", str(inputs),
                                 "--outputs", str(inputs)])
    assert kafka.exit_code == 2 and "reads Kafka itself" in kafka.output, kafka.output
    del outputs[2]["ids"]  # an output that cannot be judged
    refused = _check(tmp_path, inputs, outputs)
    assert refused.exit_code == 2 and "lack their ids or ingress_ts" in refused.output


@pytest.fixture(autouse=True)
def _no_spark_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGVAL_SPARK_CONF", raising=False)
