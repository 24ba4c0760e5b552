"""`pgval check` refuses files that cannot answer its question, in one sentence naming the
field and the first line at fault (exit 2), or with --allow-malformed judges them and says
the run is unknown, with the count. Each case was an attack that passed: a confident,
*valid* verdict over files pgval should have doubted.

Also: an input that is a FIFO or a device never hangs the command, and the phase table in
a pipe honours COLUMNS instead of being cut.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from pgval.cli import main
from pgval.store.results import ResultsStore

B = 1_698_300_000_000  # epoch milliseconds, as real recordings have them
W = 10_000


def make_inputs() -> list[dict]:
    """60 s of events at 10/s over three resources; every fourth a POST."""
    return [{"id": k + 1, "type": "POST" if k % 4 == 0 else "GET", "resource": f"r{k % 3}",
             "event_ts": B + k * 100, "ingress_ts": B + k * 100 + 5} for k in range(600)]


def make_outputs(inputs: list[dict], topology: str = "sst", window: int = W) -> list[dict]:
    """What a faithful processor writes (built here from the topologies' definition), each
    output 500 ms after its window closes."""
    keys: dict[tuple[int, str], list[dict]] = {}
    for e in inputs:
        if topology == "sst" and e["type"] != "GET":
            continue
        keys.setdefault((e["event_ts"] // window * window, e["resource"]), []).append(e)
    rows = []
    for (start, res), events in sorted(keys.items()):
        gets = sum(e["type"] == "GET" for e in events)
        if topology == "mst" and gets in (0, len(events)):
            continue
        row = {"window_start": start, "window_end": start + window, "resource": res,
               "ids": sorted(e["id"] for e in events)}
        row.update({"count": gets} if topology == "sst" else
                   {"gets": gets, "posts": len(events) - gets})
        row["ingress_ts"] = start + window + 500
        rows.append(row)
    return rows


def lines(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def check(tmp: Path, inputs: bytes | list[dict], outputs: bytes | list[dict], *flags: str,
          topology: str = "sst", window: int = W, env: dict[str, str] | None = None):
    (tmp / "in.jsonl").write_bytes(inputs if isinstance(inputs, bytes) else lines(inputs))
    (tmp / "out.jsonl").write_bytes(outputs if isinstance(outputs, bytes) else lines(outputs))
    result = CliRunner().invoke(main, [
        "check", "--topology", topology, "--inputs", str(tmp / "in.jsonl"), "--outputs",
        str(tmp / "out.jsonl"), "--window-ms", str(window), *flags], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def refused(tmp: Path, inputs: bytes | list[dict], outputs: bytes | list[dict], *flags: str,
            topology: str = "sst", window: int = W) -> str:
    """The one sentence of a refusal (exit 2)."""
    result = check(tmp, inputs, outputs, *flags, topology=topology, window=window)
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.removeprefix("error: ").rstrip("\n")


def judged(tmp: Path, inputs: bytes | list[dict], outputs: bytes | list[dict], *flags: str,
           topology: str = "sst", window: int = W) -> dict:
    result = check(tmp, inputs, outputs, "--json", *flags, topology=topology, window=window)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


ALLOW = "; pass --allow-malformed to judge the files anyway (the run is then unknown)"


def test_faithful_files_are_judged_valid(tmp_path: Path) -> None:
    """The baseline every attack below changes one thing of."""
    inputs = make_inputs()
    for topology in ("sst", "mst"):
        out = judged(tmp_path, inputs, make_outputs(inputs, topology), topology=topology)
        assert (out["guarantee"], out["valid"]) == ("exactly-once", True)


# --------------------------------------------------------------------------- inputs

@pytest.mark.parametrize("field,raw,said", [
    ("id", b'"5"', "has 'id': \"5\", not a 64-bit integer"),
    ("type", b'"get"', "has 'type': \"get\", not \"GET\" or \"POST\""),
    ("event_ts", b"NaN", "has 'event_ts': NaN, not epoch milliseconds (an integer)"),
    ("ingress_ts", b'"2023-10-26T06:00:00.805Z"',
     "has 'ingress_ts': \"2023-10-26T06:00:00.805Z\", not epoch milliseconds (an integer)"),
])
def test_an_input_field_of_the_wrong_type_is_refused(tmp_path: Path, field: str, raw: bytes,
                                                     said: str) -> None:
    """Was: the record dropped from the expected set, the run exactly-once and valid over
    the rest."""
    inputs = make_inputs()
    outputs = make_outputs(inputs)
    text = lines(inputs).split(b"\n")
    row = inputs[8]  # a GET in a window of its own output: line 9 of the file
    text[8] = orjson.dumps(row).replace(orjson.dumps({field: row[field]})[1:-1],
                                        f'"{field}":'.encode() + raw)
    assert text[8] != orjson.dumps(row)
    bad = b"\n".join(text)
    assert refused(tmp_path, bad, outputs) == (
        f"input line 9 {said}: 1 of 600 input records is malformed{ALLOW}")
    out = judged(tmp_path, bad, outputs, "--allow-malformed")
    assert out["malformed_inputs"] == 1 and out["valid"] is False
    assert out["validity_reasons"] == [f"input line 9 {said}: 1 of 600 input records is "
                                       "malformed (judged anyway: --allow-malformed)"]
    # Under the gate the run is unknown (3), never a verdict that meets.
    gated = check(tmp_path, bad, outputs, "--allow-malformed", "--expect", "at-least-once")
    assert gated.exit_code == 3, gated.output


def test_the_first_bad_line_is_named_whichever_path_read_it(tmp_path: Path) -> None:
    """A wrong value pyarrow reads (a "type" of another case) and a line only the exact
    path reads (cut short): the sentence names the earlier, counting blank lines too."""
    inputs = make_inputs()
    outputs = make_outputs(inputs)
    good = lines(inputs).split(b"\n")
    cut = orjson.dumps(inputs[30])[:-7]
    typed = orjson.dumps({**inputs[40], "type": "get"})
    for first, second, said in ((cut, typed, "is cut short (not a whole JSON object)"),
                                (typed, cut, "has 'type': \"get\", not \"GET\" or \"POST\"")):
        body = b"\n".join([b"", *good[:30], b"  ", first, *good[31:40], second, *good[41:]])
        assert refused(tmp_path, body, outputs).startswith(f"input line 33 {said}: 2 of 600 ")


# --------------------------------------------------------------------------- outputs

def test_a_truncated_output_line_is_refused(tmp_path: Path) -> None:
    """Was: "1 malformed output skipped", verdict none, valid."""
    inputs = make_inputs()
    outputs = make_outputs(inputs)
    body = lines(outputs[:-1]) + orjson.dumps(outputs[-1])[:-9]
    assert refused(tmp_path, inputs, body) == (
        f"output line {len(outputs)} is cut short (not a whole JSON object): 1 of "
        f"{len(outputs)} output records is malformed{ALLOW}")
    out = judged(tmp_path, inputs, body, "--allow-malformed")
    assert (out["malformed"], out["guarantee"], out["valid"]) == (1, "none", False)


@pytest.mark.parametrize("unit,scale", [("seconds", 0.001), ("microseconds", 1000)])
def test_an_output_clock_in_another_unit_is_refused(tmp_path: Path, unit: str,
                                                    scale: float) -> None:
    """Was (seconds): 60 of 60 outputs "before their input", verdict none, valid. Epoch
    microseconds lie beyond the year 9999 in milliseconds (malformed, said so); a clock
    counted from the run's start in microseconds is ~1,000 times late."""
    inputs = make_inputs()
    outputs = [dict(o, ingress_ts=int(o["ingress_ts"] * scale)) for o in make_outputs(inputs)]
    sentence = refused(tmp_path, inputs, outputs)
    assert sentence.startswith("output line 1 has 'ingress_ts': ")
    assert f"(it looks like {unit})" in sentence or f"; it looks like {unit}:" in sentence
    if unit == "seconds":
        assert sentence == (
            f"output line 1 has 'ingress_ts': {(B + W + 500) // 1000}, before the newest input "
            f"it holds (ingress_ts {B + 9905}), and so do 18 of 18 outputs holding inputs; it "
            f"looks like seconds: the outputs' ingress_ts must be epoch milliseconds on the "
            f"inputs' clock{ALLOW}")
    relative = [dict(e, event_ts=e["event_ts"] - B, ingress_ts=e["ingress_ts"] - B)
                for e in inputs]
    outputs = [dict(o, ingress_ts=int(o["ingress_ts"] * scale))
               for o in make_outputs(relative)]
    sentence = refused(tmp_path, relative, outputs)
    assert sentence.startswith("output line 1 has 'ingress_ts': ")
    assert f"; it looks like {unit}: the outputs' ingress_ts must be" in sentence
    out = judged(tmp_path, relative, outputs, "--allow-malformed")
    assert out["valid"] is False and len(out["validity_reasons"]) == 1


def test_outputs_of_the_other_topology_are_refused(tmp_path: Path) -> None:
    """Was: MST outputs judged as SST gave none, valid."""
    inputs = make_inputs()
    mst, sst = make_outputs(inputs, "mst"), make_outputs(inputs, "sst")
    assert refused(tmp_path, inputs, mst) == (
        f"output line 1 has 'gets'/'posts' and no 'count', the fields of MST outputs, not "
        f"SST's ({len(mst)} of {len(mst)} outputs); if they are MST's, pass --topology "
        f"mst{ALLOW}")
    assert refused(tmp_path, inputs, sst, topology="mst").startswith(
        "output line 1 has 'count' and no 'gets'/'posts', the fields of SST outputs, not "
        "MST's")


# --------------------------------------------------------------------------- windows

@pytest.mark.parametrize("end,said", [
    (5_000, "has a window 5,000 ms long (window_end − window_start), not --window-ms 10,000"),
    (-1, f"has 'window_end': {B - 1}, not after its 'window_start' {B}"),
])
def test_an_output_whose_window_is_not_of_the_question_is_refused(tmp_path: Path, end: int,
                                                                 said: str) -> None:
    """Was: exactly-once with 100 % correctness."""
    inputs = make_inputs()
    outputs = make_outputs(inputs)
    outputs[0]["window_end"] = outputs[0]["window_start"] + end
    assert refused(tmp_path, inputs, outputs) == (
        f"output line 1 {said}: 1 of {len(outputs)} outputs is no window of the "
        f"question{ALLOW}")
    out = judged(tmp_path, inputs, outputs, "--allow-malformed")
    assert out["valid"] is False and "1 of 18 outputs" in out["validity_reasons"][0]


def test_a_window_size_without_window_end_is_checked_by_the_ids(tmp_path: Path) -> None:
    """Was: without window_end a wrong --window-ms was valid (a verdict of none)."""
    inputs = make_inputs()
    bare = [{k: v for k, v in o.items() if k != "window_end"} for o in make_outputs(inputs)]
    assert refused(tmp_path, inputs, bare, window=5_000) == (
        f"--window-ms is 5,000 ms but output line 1 (window_start {B}) holds ID 52 of event_ts "
        f"{B + 5100}, outside its window, and so do 18 of 18 outputs holding inputs (are the "
        f"job's windows longer, or not tumbling windows of --window-ms?){ALLOW}")
    assert refused(tmp_path, inputs, bare, window=20_000) == (
        f"output line 4 has 'window_start': {B + 10_000}, not a multiple of --window-ms "
        f"20,000 (where the question's windows start): 9 of 18 outputs are no window of the "
        f"question{ALLOW}")
    assert judged(tmp_path, inputs, bare)["guarantee"] == "exactly-once"


def test_windows_in_seconds_are_refused_whatever_the_window_size(tmp_path: Path) -> None:
    """Was: "pass --window-ms 10", which then gave none, valid."""
    inputs = make_inputs()
    seconds = [dict(o, window_start=o["window_start"] // 1000,
                    window_end=o["window_end"] // 1000) for o in make_outputs(inputs)]
    for window in (W, 10):
        sentence = refused(tmp_path, inputs, seconds, window=window)
        assert sentence == (
            f"output line 1 has 'window_start': {B // 1000}, no window of the inputs' event "
            f"times (event_ts from {B // window * window} to {B + 59_900}), and so do 18 of "
            f"18 outputs; it looks like seconds: window_start and window_end are epoch "
            f"milliseconds, as event_ts{ALLOW}")
        assert "pass --window-ms" not in sentence


def test_a_stored_check_keeps_the_unknown_validity(tmp_path: Path) -> None:
    """--allow-malformed with --db: the stored run is unknown, with the same reason."""
    inputs = make_inputs()
    outputs = make_outputs(inputs)
    outputs[0]["window_end"] += 1
    db = tmp_path / "r.db"
    out = judged(tmp_path, inputs, outputs, "--allow-malformed", "--db", str(db))
    (run,) = ResultsStore(db).runs()
    assert run["valid"] == 0
    assert json.loads(run["validity_reasons"]) == out["validity_reasons"]


# --------------------------------------------------------------------------- inputs that hang

def pgval(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgval.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_a_fifo_without_a_writer_reads_as_empty_instead_of_hanging(tmp_path: Path) -> None:
    """Was: `--inputs FIFO` hung in open() until some process wrote to it."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out.jsonl"
    out.write_bytes(lines(make_outputs(make_inputs())))
    proc = pgval("check", "--topology", "sst", "--inputs", str(fifo), "--outputs", str(out),
                 "--json", "--allow-malformed")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["expected"] == 0
    assert pgval("oracle", "--topology", "sst", "--inputs", str(fifo)).stdout == ""


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_in_one_sentence(tmp_path: Path, device: str) -> None:
    """Was: an endless read (or a hang on a terminal)."""
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"")
    for argv in (["check", "--topology", "sst", "--inputs", device, "--outputs", str(out)],
                 ["check", "--topology", "sst", "--inputs", str(out), "--outputs", device],
                 ["oracle", "--topology", "sst", "--inputs", device]):
        proc = pgval(*argv, timeout=30)
        assert proc.returncode == 2
        flag = "--inputs" if argv[4] == device else "--outputs"
        assert proc.stderr == (f"error: {flag} {device} is a terminal or device, not a file "
                               "of records: pass a file or a pipe\n")


def test_pipes_and_dev_null_still_work(tmp_path: Path) -> None:
    """Process substitution hands pgval an open pipe; /dev/null is an empty file."""
    inputs = make_inputs()
    (tmp_path / "in.jsonl").write_bytes(lines(inputs))
    (tmp_path / "out.jsonl").write_bytes(lines(make_outputs(inputs)))
    script = (f"{sys.executable} -m pgval.cli check --topology sst --inputs <(cat in.jsonl) "
              "--outputs <(cat out.jsonl) --json")
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["guarantee"] == "exactly-once"
    proc = pgval("check", "--topology", "sst", "--inputs", os.devnull, "--outputs",
                 os.devnull, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["expected"] == 0


# --------------------------------------------------------------------------- width

@pytest.mark.parametrize("columns", [60, 100, 250])
def test_the_phase_table_honours_columns_in_a_pipe(tmp_path: Path, columns: int) -> None:
    """Was: cut at 140 columns whatever COLUMNS said ("undefi…", a column dropped)."""
    inputs = make_inputs()
    outputs = make_outputs(inputs)[:6]  # the last windows never output: undefined latency
    result = check(tmp_path, inputs, outputs, "--phases", f"{B},{B + 30_000},{B + 50_000}",
                   env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    table = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│├└"]
    assert table and max(len(line) for line in table) <= columns
    assert "…" not in result.stdout
    assert "undefined (no output)" in result.stdout
    for header in ("expected", "unprocessed", "reliability", "reliable ev/s", "lat p50 s",
                   "lat p99 s", "Karimov p50 s"):
        assert header in result.stdout, header
    tables = sum(line.startswith("┏") for line in table)
    assert (tables == 1) == (columns == 250)  # narrower: the same rows, in several tables
    assert result.stdout.count("SST — per phase") == 1


def test_a_pipe_without_columns_is_140_wide_and_the_table_is_whole(tmp_path: Path) -> None:
    inputs = make_inputs()
    (tmp_path / "in.jsonl").write_bytes(lines(inputs))
    (tmp_path / "out.jsonl").write_bytes(lines(make_outputs(inputs)[:6]))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "check", "--topology", "sst",
                           "--inputs", "in.jsonl", "--outputs", "out.jsonl", "--phases",
                           f"{B},{B + 30_000},{B + 50_000}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=env,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line[:1] in "┏┃┡│├└"]
    assert max(len(line) for line in table) <= 140
    assert "Karimov p50 s" in proc.stdout and "…" not in proc.stdout


def test_the_inputs_of_this_module_are_what_they_claim() -> None:
    """The faithful outputs hold every GET once (18 outputs: 6 windows × 3 resources)."""
    inputs = make_inputs()
    outputs = make_outputs(inputs)
    assert len(outputs) == 18
    assert sorted(i for o in outputs for i in o["ids"]) == [
        e["id"] for e in inputs if e["type"] == "GET"]
    assert copy.deepcopy(outputs) == make_outputs(inputs)
