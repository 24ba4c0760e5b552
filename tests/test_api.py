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
    from pgval import api


    def test_a_sabotaged_sink_is_not_exactly_once(pgval_cluster, tmp_path):
        """The e1 sink writes its second batch twice (pgval's self-test): a verdict held
        as an assertion sees it."""
        result = pgval_cluster.validate(
            topology="sst", pg="e1", sabotage="dup-batch:2", rate=400, resources=4,
            phase_seconds=6, warmup_seconds=5, warmup_max_seconds=8, window_ms=2000,
            trigger_ms=500, brokers=1, partitions=3, workers=1, db=tmp_path / "r.db")
        assert result.summary()["duplicate"] > 0
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
    is stopped when the session ends (the check of this test: nothing left behind)."""
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
