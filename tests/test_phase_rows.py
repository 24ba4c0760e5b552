"""Phase rows that add up: one small example, on both clocks, end to end.

One control input is duplicated by a failure-phase output. On the output's clock (the
``duplicate``/``incorrect`` fields, unchanged) control shows no anomaly yet a reliability
below 100 %, and failure shows two duplicates at 100 %. On the input's clock
(``reliable``, ``duplicated_ids``, ``incorrect_ids``) control's reliability and its
anomaly are about the same ID.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import orjson
from click.testing import CliRunner
from rich.console import Console

from pgval.checker.evaluate import evaluate
from pgval.checker.render import render_evaluation
from pgval.cli import main
from pgval.records.parse import ResourceTable
from pgval.records.phases import Phases
from tests.strategies import to_inputs, to_outputs

W = 100
PHASES = (0, 1_000, 2_000)  # START, T2, T3


def issue_example() -> tuple[list[dict], list[dict]]:
    """Inputs 1 (control), 2 (failure), 3 (recovery); window 0 is re-emitted in failure.

    The failure-phase output lists input 1 twice (a replayed record read twice), so it
    adds two duplicate occurrences of one control ID.
    """
    inputs = [{"id": i, "type": "GET", "resource": "r0", "event_ts": t + 10, "ingress_ts": t + 20}
              for i, t in ((1, 0), (2, 1_000), (3, 2_000))]
    outputs = [{"window_start": t, "window_end": t + W, "resource": "r0", "count": 1,
                "ids": [i], "ingress_ts": t + 500} for i, t in ((1, 0), (2, 1_000), (3, 2_000))]
    outputs.append({"window_start": 0, "window_end": W, "resource": "r0", "count": 2,
                    "ids": [1, 1], "ingress_ts": 1_700})
    return inputs, outputs


def test_issue_example_on_both_clocks() -> None:
    inputs, outputs = issue_example()
    rt = ResourceTable()
    ev = evaluate(to_inputs(inputs, rt), to_outputs(outputs, rt), "sst", W, Phases(*PHASES))
    v = ev.validation
    control, failure = v.phases["control"], v.phases["failure"]
    # The output's clock, as before: the anomaly sits where the output appeared.
    assert (control.duplicate, control.incorrect) == (0, 0)
    assert control.reliability == 0.0
    assert (failure.duplicate, failure.reliability) == (2, 1.0)
    # The input's clock: control's unreliable ID is control's duplicated ID.
    assert (control.expected, control.reliable, control.duplicated_ids) == (1, 0, 1)
    assert (failure.reliable, failure.duplicated_ids, failure.incorrect_ids) == (1, 0, 0)
    for c in v.phases.values():
        assert c.reliable + c.duplicated_ids + c.incorrect_ids + c.unprocessed == c.expected
    assert v.ids("duplicate").tolist() == [1] and v.duplicated_ids == 1
    assert v.ids("unprocessed").tolist() == [] and v.ids("incorrect").tolist() == []


def test_incorrect_ids_follow_the_input() -> None:
    inputs, outputs = issue_example()
    outputs = outputs[:3]
    # In recovery, input 2 (failure) shows up in a key it does not belong to.
    outputs.append({"window_start": 2_000, "window_end": 2_100, "resource": "r9", "count": 1,
                    "ids": [2], "ingress_ts": 2_600})
    rt = ResourceTable()
    v = evaluate(to_inputs(inputs, rt), to_outputs(outputs, rt), "sst", W,
                 Phases(*PHASES)).validation
    assert (v.phases["recovery"].incorrect, v.phases["recovery"].incorrect_ids) == (1, 0)
    assert (v.phases["failure"].incorrect, v.phases["failure"].incorrect_ids) == (0, 1)
    assert v.phases["failure"].reliability == 0.0
    assert v.ids("incorrect").tolist() == [2] and v.incorrect_ids == 1


def test_check_json_and_table_show_both_clocks(tmp_path: Path) -> None:
    inputs, outputs = issue_example()
    i, o = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    i.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in inputs))
    o.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in outputs))
    args = ["check", "--topology", "sst", "--inputs", str(i), "--outputs", str(o),
            "--window-ms", str(W), "--phases", ",".join(map(str, PHASES))]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    phases = json.loads(result.output)["phases"]
    assert phases["control"] == {"expected": 1, "processed": 1, "unprocessed": 0,
                                 "duplicate": 0, "incorrect": 0, "reliable": 0,
                                 "duplicated_ids": 1, "incorrect_ids": 0}
    assert phases["failure"]["duplicate"] == 2 and phases["failure"]["duplicated_ids"] == 0
    rt = ResourceTable()
    ev = evaluate(to_inputs(inputs, rt), to_outputs(outputs, rt), "sst", W, Phases(*PHASES))
    console = Console(record=True, width=200, file=io.StringIO(), color_system=None)
    render_evaluation(ev, console)
    text = console.export_text()
    assert "dup IDs" in text and "inc IDs" in text and "by input time" in text
    control_row = next(line for line in text.splitlines() if line.lstrip("│ ").startswith(
        "control"))
    cells = [c.strip() for c in control_row.strip("│ ").split("│")]
    # phase, expected, processed, unprocessed, duplicate, incorrect, dup IDs, inc IDs, rel.
    assert cells[:9] == ["control", "1", "1", "0", "0", "0", "1", "0", "0.00%"]
