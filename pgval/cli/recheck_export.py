"""`pgval recheck` and `pgval export`: a stored run again from its kept, verified evidence."""

from __future__ import annotations

import shlex
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from pgval.cli.common import (
    console,
    finish_gate,
    gate_options,
    print_json,
    print_output_before_input,
    print_validity,
    print_views,
)
from pgval.cli.errors import UserError
from pgval.core.files import is_dir
from pgval.store.dbfile import plain_error

if TYPE_CHECKING:
    from pgval.evidence.bundle import Manifest
    from pgval.evidence.recheck import Recheck
    from pgval.scale.agreement import SparkCheck


@click.command()
@click.argument("run")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Results database: where a run id is looked up (the run's directory, or, "
                   "once that is gone, a copy of its evidence beside the database in "
                   "evidence/run-ID/), and whose hashes of the run's evidence it must match "
                   "(without it nothing is verified).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the `pgval check --json` object (plus validity).")
@click.option("--store", "store_derived", is_flag=True,
              help="With a run id and --db: store the recomputed recovery metrics and "
                   "unprocessed causes (after a definition improved), only if the verdict "
                   "and counts equal the stored ones. With a run directory and --db: store "
                   "a run whose storing failed (its evidence unedited since its SHA256SUMS; "
                   "without them it is stored unsealed), never as verified evidence.")
@click.option("--checker", type=click.Choice(["numpy", "both"]), default="numpy",
              show_default=True,
              help="both: judge the run again with the Spark checker too (Algorithms 1 and 3 "
                   "as Spark jobs over Parquet tables) and hold it to the numpy checker: the "
                   "same figures, phase rows and anomaly sets, ID for ID, else exit 3.")
@click.option("--spark-master", default=None,
              help="With --checker both: where the Spark checker runs (default local[2]; a "
                   "cluster's spark://HOST:PORT needs --spark-out on storage every executor "
                   "reads).")
@click.option("--spark-out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --checker both: keep the Spark checker's tables and anomaly sets "
                   "(Parquet) in this folder (default: a temporary one, removed).")
@gate_options
def recheck(run: str, db: Path | None, as_json: bool, store_derived: bool, checker: str,
            spark_master: str | None, spark_out: Path | None, expect: str | None,
            junit_path: Path | None) -> None:
    """Recompute a stored run's results from its kept evidence (RUN: directory or run id).

    With --db the evidence is held to the hashes stored with the run and the stored row's
    figures to the recomputed ones (those that differ are named). --expect is met only by
    verified evidence whose row equals its re-check; anything else exits 3 with the reason."""
    from pgval.evidence.recheck import locate_run, parse_run_id
    from pgval.evidence.recheck import recheck as do_recheck
    from pgval.evidence.recheck import store_derived as do_store

    if checker != "both" and (spark_master is not None or spark_out is not None):
        raise UserError("--spark-master and --spark-out go with --checker both")
    if store_derived and db is not None and is_dir(Path(run, "evidence")):
        from pgval.evidence.run_import import import_run

        if expect is not None or junit_path is not None or checker == "both":
            raise UserError("--expect, --junit and --checker judge a re-check, and --store of a "
                            "run directory only imports it: import first, then run `pgval "
                            "recheck RUN_ID --db DB --expect ...`")
        try:
            run_id, sealed = import_run(Path(run), db)
        except sqlite3.Error as exc:  # still full, locked, read-only: try again later
            raise plain_error(db, exc) from exc
        console.print(f"stored {escape(run)} as run {run_id} in {escape(str(db))}, "
                      f"{escape(sealed)}")
        return
    if store_derived and (db is None or parse_run_id(run) is None):
        raise UserError("--store needs a run id and --db (the row it updates), or a run "
                        "directory and --db (a run whose storing failed, imported)")
    started = time.monotonic()
    try:
        run_dir = locate_run(run, db)
        if checker == "both":
            _refuse_spark_judged(run, run_dir)
        result = do_recheck(run_dir, db, None if run_dir == Path(run) else parse_run_id(run))
        # The Spark checker first: what two checkers disagree on is not stored.
        spark_check = (_spark_check(result, spark_master or "local[2]", spark_out)
                       if checker == "both" else None)
        if store_derived:
            assert db is not None
            _refuse_disagreement(spark_check)
            do_store(db, parse_run_id(run) or 0, result)
    except sqlite3.Error as exc:  # the row or hashes of a damaged database
        raise plain_error(db or "--db", exc) from exc
    from pgval.checker.gate import Case

    summary = result.summary()
    if spark_check is not None:
        summary["spark_check"] = spark_check.as_dict()
    case = Case.of_summary(recheck_case_name(result.manifest), "pgval.evidence.recheck",
                           summary, time.monotonic() - started)
    if as_json:
        print_json(summary)
        _refuse_disagreement(spark_check)
        finish_gate([case], expect, junit_path, "pgval recheck", quiet=True)
        return
    from pgval.checker.render import render_evaluation

    m = result.manifest
    render_evaluation(result.evaluation, console,
                      title=f"re-check of {m.topology.upper()} run {m.run_id} — per phase")
    print_output_before_input(result.evaluation)
    print_validity(result.validity)
    print_views(summary)
    if result.validity_changes:
        console.print(f"  stored validity differs by kind: {result.validity_changes}")
    console.print(escape(result.anomalies["note"]))
    if result.figures["same"] is not None:
        console.print(escape(result.figures["note"]))
    console.print(escape(result.evidence.note))
    if spark_check is not None and spark_check.agrees:  # else the error line says it
        console.print(escape(spark_check.note()))
    _refuse_disagreement(spark_check)
    finish_gate([case], expect, junit_path, "pgval recheck")


def _spark_check(result: Recheck, master: str, keep: Path | None) -> SparkCheck:
    """The re-checked run judged by the Spark checker too, on the same columns."""
    from pgval.api import spark_check

    return spark_check(result, master, keep)


def _refuse_spark_judged(run: str, run_dir: Path) -> None:
    """``--checker both`` holds numpy's judgement to Spark's: a run judged on Spark kept no
    records for numpy's (its plain re-check is the Spark oracle's and checker's again)."""
    from pgval.evidence.bundle import EvidenceError, Manifest
    from pgval.evidence.recheck import judged_on_spark

    try:
        manifest = Manifest.read(run_dir)
    except EvidenceError:
        return  # the re-check says what is wrong with it
    if judged_on_spark(manifest) is not None:
        raise UserError(f"{run} was judged on Spark (--checker spark): it kept the Spark "
                        "read's tables, no records for numpy's checker; `pgval recheck` "
                        "without --checker both judges it again on Spark")


def _refuse_disagreement(spark_check: SparkCheck | None) -> None:
    """Two checkers that disagree leave the verdict in doubt: exit 3, the differences said."""
    from pgval.core.errors import EvidenceInDoubt

    if spark_check is not None and not spark_check.agrees:
        raise EvidenceInDoubt(spark_check.note())


@click.command()
@click.argument("run")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Results database: where a run id is looked up (its run directory, or "
                   "evidence/run-ID/ beside the database), and whose hashes of the run's "
                   "evidence it must match (without it nothing is verified).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True,
              help="Folder for inputs.jsonl, outputs.jsonl, anomalies.jsonl and run.json.")
def export(run: str, db: Path | None, out_dir: Path) -> None:
    """Write a stored run's streams in the `pgval check` format (RUN: directory or run id)."""
    from pgval.evidence.export import export as do_export
    from pgval.evidence.recheck import locate_run, parse_run_id

    try:
        run_dir = locate_run(run, db)
        info = do_export(run_dir, out_dir, db,
                         None if run_dir == Path(run) else parse_run_id(run))
    except sqlite3.Error as exc:
        raise plain_error(db or "--db", exc) from exc
    console.print(f"wrote {info['inputs']:,} inputs, {info['outputs']:,} outputs and "
                  f"{info['anomalies']:,} anomalies ({info['anomalies_source']}) to "
                  f"{escape(str(out_dir))}; check them with:")
    # One line whatever the terminal's width, and quoted for the shell: pasted as printed.
    console.print(f"  {check_command(info, out_dir)}", soft_wrap=True, markup=False,
                  highlight=False)
    console.print(escape(info["evidence"]["note"]))


def check_command(info: dict, out_dir: Path) -> str:
    """The `pgval check` command line that judges an export (``info``: its run.json)."""
    start, t2, t3 = info["phases"]
    words = ["pgval", "check", "--topology", str(info["topology"]),
             "--inputs", str(out_dir / "inputs.jsonl"),
             "--outputs", str(out_dir / "outputs.jsonl"),
             "--window-ms", str(info["window_ms"]), "--phases", f"{start},{t2},{t3}", "--json"]
    if any((info.get("malformed") or {}).values()):  # the export keeps them as lines
        words.append("--allow-malformed")
    return shlex.join(words)


def recheck_case_name(manifest: Manifest) -> str:
    """A re-check's name in the gate: its run's :meth:`RunSpec.case_name` (the same for
    every re-check of one kind of run), or ``run N`` where the stored spec cannot be
    read back (an evidence directory older than the spec's shape)."""
    from pgval.core.spec import RunSpec

    try:
        return RunSpec.from_record(manifest.config).case_name()
    except Exception:  # noqa: BLE001 - any stored spec this pgval cannot read
        return f"run {manifest.run_id}"
