"""pgval as a library: a validation from Python, with the typed result the CLI prints.

The CLI is a thin layer over this. A test suite holds a verdict as an assertion::

    from pgval import api

    result = api.validate(job="jobs/orders.py:build", pg="e1", fault="crash",
                          inputs_spec="inputs/orders.toml", phase_seconds=20)
    api.assert_guarantee(result, "exactly-once")

Settings are ``pgval validate``'s options as keywords, with underscores
(``phase_seconds=20``, ``replay={"orders": "orders.jsonl"}``, ``workers=2``); they are
checked as the CLI checks them (the job loaded, its input model read, its trigger checked)
before anything starts, and a mistake is a :class:`~pgval.core.errors.UserMistake` of one
sentence. :class:`Cluster` keeps one embedded cluster up across validations (what the
pytest plugin's ``pgval_cluster`` fixture hands a test session); :func:`recheck` reads a
stored run back from its evidence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pgval.checker.gate import EXPECTATIONS, MET, Case
from pgval.core.errors import UserMistake
from pgval.core.spec import ClusterSpec, RunSpec, profile_settings

__all__ = ["Cluster", "GuaranteeNotMet", "assert_guarantee", "case", "recheck", "run_spec",
           "validate"]


class GuaranteeNotMet(AssertionError):
    """A verdict weaker than expected, or a run whose validity is unknown: the message is
    the verdict line (guarantee, counts, validity and its reasons)."""


def run_spec(profile: str | None = None, **settings: Any) -> RunSpec:
    """A run's spec from ``validate``'s options as keywords, checked as the CLI checks
    them: a job (``job="PATH.py:FUNCTION"``) is loaded and checked and its topology set,
    file paths are made absolute. ``profile`` (``"ci"``): its settings
    (:data:`pgval.core.spec.PROFILES`) where ``settings`` do not name them."""
    from pgval.config import resolve
    from pgval.run.setup import checked_job

    settings = {**profile_settings(profile), **settings}

    run_fields = {f.name for f in dataclasses.fields(RunSpec)} - {"cluster"}
    cluster_fields = {f.name for f in dataclasses.fields(ClusterSpec)}
    unknown = set(settings) - run_fields - cluster_fields
    if unknown:
        raise UserMistake(f"not a setting of a run: {', '.join(sorted(unknown))} (the "
                          "settings are pgval validate's options, with underscores)")
    given = {k: v for k, v in settings.items() if k in run_fields}
    if given.get("job") is not None:
        given.setdefault("topology", "job")
    cluster = ClusterSpec(**{k: v for k, v in settings.items() if k in cluster_fields})
    return checked_job(resolve({**given, "cluster": cluster}))


def validate(spec: RunSpec | None = None, *, run_dir: Path | str | None = None,
             db: Path | str | None = None, cluster: Cluster | None = None,
             on_status: Callable[[Any], None] | None = None, lint: bool = True,
             **settings: Any) -> Any:
    """Run one validation and return its :class:`~pgval.run.result.ExperimentResult`
    (``.summary()`` is ``validate --json``'s object; ``.evaluation``, ``.validity``).

    ``spec`` or ``settings`` (:func:`run_spec`); ``run_dir`` keeps the evidence (default
    ``./runs/<time>-<pid>``); ``db`` stores the run (then ``pgval recheck`` can verify
    it); ``cluster`` runs it on a warm :class:`Cluster` instead of a cluster of its own;
    ``lint``: a user's job is first tried on a sample as ``pgval lint`` does, and one with
    problems raises :class:`~pgval.run.lint.LintFailed` before anything starts.
    Everything the run started is stopped when it returns or raises."""
    from pgval.core.extras import require
    from pgval.host.jars import installed_spark
    from pgval.run.experiment import Experiment, default_run_dir

    if spec is not None and settings:
        raise UserMistake("give a spec or settings, not both")
    cfg = spec if spec is not None else run_spec(**settings)
    if str(cfg.deploy) != "compose":
        require("spark")
        installed_spark()
    if lint:
        from pgval.run.lint import lint_before_run

        lint_before_run(cfg)
    where = Path(run_dir) if run_dir is not None else default_run_dir()
    deployment = cluster.deployment_for(cfg) if cluster is not None else None
    return Experiment(cfg, where, db=Path(db) if db is not None else None,
                      on_status=on_status, deployment=deployment,
                      drivers=cluster.shared_drivers if cluster is not None else None).run()


def recheck(run_dir: Path | str, db: Path | str | None = None) -> Any:
    """A stored run judged again from its evidence (:func:`pgval.evidence.recheck.recheck`);
    with ``db`` the evidence is verified against the seal the run kept."""
    from pgval.evidence.recheck import recheck as recheck_run

    return recheck_run(Path(run_dir), Path(db) if db is not None else None)


def spark_check(result: Any, master: str = "local[2]", keep: Path | str | None = None) -> Any:
    """A validation's or a re-check's run judged again by the Spark checker (Algorithms 1
    and 3 as Spark jobs on ``master``) and held to the numpy checker's answer: a
    :class:`pgval.scale.agreement.SparkCheck` (``agrees``, ``differences``, the Spark
    figures); ``keep``: a folder for its Parquet tables and anomaly sets. A re-check's
    built-in run has its expected outputs computed again by the Spark oracle too."""
    from pgval.scale.agreement import check_evaluation

    streams = getattr(result, "streams", None)
    return check_evaluation(result.evaluation, master, Path(keep) if keep is not None else None,
                            None if streams is None else streams.events)


def case(result: Any, name: str | None = None) -> Case:
    """The CI gate's view of a result (a validation's, a re-check's, or a ``--json``
    object): its outcome against an expectation is :meth:`Case.outcome`."""
    summary = result if isinstance(result, Mapping) else result.summary()
    return Case.of_summary(name or "pgval", "pgval.api", summary)


def assert_guarantee(result: Any, expected: str) -> None:
    """Pass when the run is valid and its verdict at least ``expected`` (exactly-once
    meets all three), as ``--expect`` exits 0; else :class:`GuaranteeNotMet` with the
    verdict line, which says whether the job was weaker or the run could not tell."""
    if expected not in EXPECTATIONS:
        raise UserMistake(f"expected must be one of {', '.join(EXPECTATIONS)}, not "
                          f"{expected!r}")
    judged = case(result)
    outcome = judged.outcome(expected)
    if outcome != MET:
        raise GuaranteeNotMet(f"expected {expected}, got {judged.verdict()} ({outcome})")


class Cluster:
    """One embedded cluster (Kafka and Spark, local processes) kept up across
    validations, each run still with its own topics and checkpoint; stopped by
    :meth:`close` (or the ``with`` block's end), every process of it. A run that needs
    other daemon settings (``delay-gt-timeout``'s time-outs) gets a fresh one.

    ``driver``: ``"fresh"``, a driver process per run, or ``"shared"``, one driver that
    runs the runs' queries one after another where their fault and sink allow
    (``matrix --driver shared``, docs/deploy.md "A shared driver"): warm from the second
    run on (a user's job with the runs of the same job)."""

    def __init__(self, root: Path | str, driver: str = "fresh") -> None:
        from pgval.core.redact import private_dir
        from pgval.deploy.warm import WarmDeployments

        if driver not in ("fresh", "shared"):
            raise UserMistake(f"driver must be 'fresh' or 'shared', not {driver!r}")
        self.root = private_dir(Path(root).resolve())
        self._warm = WarmDeployments(self.root, label="pgval-api",
                                     shared_driver=driver == "shared")
        self._runs = 0

    def deployment_for(self, cfg: RunSpec) -> Any:
        """The running deployment for a run of ``cfg`` (started on first use)."""
        return self._warm.for_run(cfg)

    @property
    def shared_drivers(self) -> Any:
        """The runs' shared driver (``driver="shared"``), None when each has its own."""
        return self._warm.drivers

    def validate(self, spec: RunSpec | None = None, *, run_dir: Path | str | None = None,
                 db: Path | str | None = None, **settings: Any) -> Any:
        """:func:`validate` on this cluster; run directories under its root by default."""
        self._runs += 1
        where = run_dir if run_dir is not None else self.root / f"run-{self._runs}"
        return validate(spec, run_dir=where, db=db, cluster=self, **settings)

    def close(self) -> None:
        self._warm.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
