"""pgval as a library (``pgval.api``) and its pytest plugin: settings checked as the CLI
checks them, the verdict as an assertion, and a user's own test session holding a
sabotaged run's verdict on the real cluster."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pgval import api
from pgval.core.errors import UserMistake

ROOT = Path(__file__).resolve().parent.parent
FILTER = f"{ROOT / 'examples' / 'jobs' / 'filter.py'}:build"


def summary(guarantee: str, valid: bool = True, **numbers: int) -> dict:
    return {"guarantee": guarantee, "valid": valid,
            "validity_reasons": [] if valid else ["the drain timed out"],
            "expected": 10, "duplicate": 0, "unprocessed": 0, "incorrect": 0, **numbers}


def test_settings_are_checked_as_the_cli_checks_them(monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    monkeypatch.chdir(ROOT / "examples")
    spec = api.run_spec(job="jobs/orders.py:build", pg="e1", fault="crash",
                        inputs_spec="inputs/orders.toml", phase_seconds=20, workers=2)
    assert str(spec.topology) == "job" and spec.job == f"{ROOT}/examples/jobs/orders.py:build"
    assert spec.inputs_spec == str(ROOT / "examples" / "inputs" / "orders.toml")
    assert spec.cluster.workers == 2 and spec.phase_seconds == 20
    assert spec.case_name() == "orders.py:build kafka e1 crash"
    for settings, said in [
        ({"job": FILTER, "phase_secs": 5}, "not a setting of a run: phase_secs"),
        ({"job": "jobs/nowhere.py:build"}, "no such file"),
        ({"job": FILTER, "pg": "z9"}, "z9"),
        ({"job": "jobs/orders.py:build", "replay": {"orders": "inputs/nowhere.jsonl"}},
         "cannot read it"),
    ]:
        with pytest.raises(UserMistake) as caught:
            api.run_spec(**settings)
        assert said in str(caught.value) and "\n" not in str(caught.value)


def test_the_verdict_as_an_assertion() -> None:
    """Met as ``--expect`` exits 0; weaker and unknown raise, the message saying which."""
    api.assert_guarantee(summary("exactly-once"), "at-least-once")
    api.assert_guarantee(summary("at-least-once", duplicate=3), "at-least-once")
    with pytest.raises(api.GuaranteeNotMet, match=r"expected exactly-once, got "
                       r"at-least-once \(3 duplicate.*\(weaker\)"):
        api.assert_guarantee(summary("at-least-once", duplicate=3), "exactly-once")
    with pytest.raises(api.GuaranteeNotMet, match="the drain timed out.*unknown"):
        api.assert_guarantee(summary("exactly-once", valid=False), "exactly-once")
    with pytest.raises(UserMistake, match="expected must be one of"):
        api.assert_guarantee(summary("exactly-once"), "exactly-twice")


USER_TEST = '''
    import numpy as np

    from pgval import api
    from pgval.records.phases import CONTROL, FAILURE, RECOVERY


    def test_a_duplicated_batch_is_flagged_exactly(pgval_cluster, tmp_path):
        """MST's e1 sink writes its second batch with real outputs twice (pgval's
        self-test, a canary on the real cluster): exactly those IDs are duplicated, each
        once, in the phases their inputs belong to, and the verdict held as an assertion
        is at-least-once, not exactly-once."""
        result = pgval_cluster.validate(
            topology="mst", pg="e1", sabotage="dup-batch:2", rate=400, resources=4,
            phase_seconds=8, warmup_seconds=8, warmup_max_seconds=10, window_ms=2000,
            watermark_ms=1000, trigger_ms=1000, get_share=0.9, brokers=1, partitions=3,
            workers=1, db=tmp_path / "r.db")
        [event] = [b for b in result.batches if b.get("event") == "sabotage"]
        doubled = set(event["ids"])
        assert doubled and len(doubled) == len(event["ids"])
        v = result.evaluation.validation
        assert set(v.ids("duplicate").tolist()) == doubled
        assert v.duplicate == len(doubled)  # each written exactly twice
        assert (v.unprocessed, v.incorrect, v.malformed) == (0, 0, 0)
        exp = result.evaluation.expected
        sel = np.isin(exp.id_sorted, np.fromiter(doubled, dtype=np.int64))
        codes = result.phases.of(exp.id_ingress[sel])
        want = {name: int((codes == c).sum()) for name, c in
                (("control", CONTROL), ("failure", FAILURE), ("recovery", RECOVERY))}
        assert {p: v.phases[p].duplicated_ids for p in want} == want
        assert result.validity.valid, result.validity.reasons

        api.assert_guarantee(result, "at-least-once")
        try:
            api.assert_guarantee(result, "exactly-once")
        except api.GuaranteeNotMet as exc:
            assert "expected exactly-once, got at-least-once" in str(exc)
        else:
            raise AssertionError("a duplicated batch met exactly-once")
        again = api.recheck(result.run_dir, tmp_path / "r.db")
        api.assert_guarantee(again, "at-least-once")
'''


@pytest.mark.cluster
def test_a_users_test_session_holds_a_verdict_with_the_plugin(tmp_path: Path) -> None:
    """A user's own pytest session, in a process of its own: pytest finds the plugin (an
    installed entry point, no conftest), the session's cluster runs the validation and
    is stopped when the session ends (the check of this test: nothing left behind). The
    session's test is also the canary of a duplicated batch (tests/test_canary.py has the
    dropped one)."""
    (tmp_path / "test_guarantee.py").write_text(textwrap.dedent(USER_TEST))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_guarantee.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=480)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


def test_the_docs_python_example_names_settings_the_api_takes(monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """docs/your-job.md's pytest example: every ``validate(...)`` call's settings pass
    :func:`api.run_spec` from the repository's root, as a user's CI would run it."""
    import ast
    import re

    text = (ROOT / "docs" / "your-job.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "pgval_cluster" in b]
    assert blocks, "docs/your-job.md lost its pytest example"
    monkeypatch.chdir(ROOT)
    calls = [node for node in ast.walk(ast.parse(blocks[0]))
             if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "validate"]
    assert calls
    for call in calls:
        settings = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg != "db"}
        assert api.run_spec(**settings).job


def test_a_cluster_shares_its_driver_only_when_asked(tmp_path: Path) -> None:
    """``api.Cluster(driver="shared")`` hands its runs one shared driver (started with the
    first run that can share it, as ``matrix --driver shared``); by default each run has
    its own; nothing starts before a run."""
    with api.Cluster(tmp_path / "fresh") as fresh:
        assert fresh.shared_drivers is None
    with api.Cluster(tmp_path / "shared", driver="shared") as shared:
        assert shared.shared_drivers is not None and shared.shared_drivers.current is None
    with pytest.raises(UserMistake, match="driver must be 'fresh' or 'shared'"):
        api.Cluster(tmp_path / "other", driver="warm")
