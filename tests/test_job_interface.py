"""A user's job (`--job`): how it is named and loaded, and the outputs pgval refuses to
judge, each in one sentence; offline (schemas as Spark prints their types)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgval.topologies.job import JobError, JobRef, check_output, load

GOOD = '''
def build(spark, sources):
    return sources["get"]
build.key = ["window_start", "resource"]

def unkeyed(spark, sources, extra=None):
    return sources["get"]

def one(spark):
    return None

not_a_function = 3

def bad_key(spark, sources):
    return None
bad_key.key = "resource"

def ids_key(spark, sources):
    return None
ids_key.key = ["resource", "ids"]
'''


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_job.py"
    path.write_text(GOOD)
    return path


def test_a_file_job_loads_with_its_key(job_file: Path) -> None:
    job = load(f"{job_file}:build")
    assert job.key == ("window_start", "resource")
    assert job.build(None, {"get": "stream"}) == "stream"
    unkeyed = load(f"{job_file}:unkeyed")
    assert unkeyed.key is None
    assert unkeyed.key_columns(["window_start", "resource", "ids", "n"]) == (
        "window_start", "resource", "n")


def test_a_module_job_loads_from_the_path(tmp_path: Path, job_file: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "shop"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "jobs.py").write_text(GOOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load("shop.jobs:build").key == ("window_start", "resource")
    with pytest.raises(JobError, match=r"no module shop\.nothing \(is it on PYTHONPATH\?\)"):
        load("shop.nothing:build")


@pytest.mark.parametrize(("spec", "says"), [
    ("build", "expected PATH.py:FUNCTION or package.module:FUNCTION"),
    ("{f}:", "expected PATH.py:FUNCTION"),
    ("{f}:not-a-name", "expected PATH.py:FUNCTION"),
    ("not a module:build", "is neither a .py file nor a module name"),
    ("{d}/missing.py:build", "no such file"),
    ("{f}:absent", "has no absent"),
    ("{f}:not_a_function", "not_a_function is not a function"),
    ("{f}:one", "one(spark) must take two arguments, (spark, kafka) or (spark, sources)"),
    ("{f}:bad_key", "bad_key.key must be a non-empty list of column names, not 'resource'"),
    ("{f}:ids_key", "ids_key.key names 'ids', the column of input IDs"),
])
def test_a_job_that_cannot_be_used_is_one_sentence(job_file: Path, spec: str,
                                                   says: str) -> None:
    with pytest.raises(JobError) as err:
        load(spec.format(f=job_file, d=job_file.parent))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_broken_file_says_where(tmp_path: Path) -> None:
    (tmp_path / "syntax.py").write_text("def build(spark, sources):\n    return (\n")
    with pytest.raises(JobError, match=r"syntax\.py line \d+: "):
        load(f"{tmp_path / 'syntax.py'}:build")
    (tmp_path / "raises.py").write_text("import json\njson.loads('{')\n")
    with pytest.raises(JobError, match=r"importing .*raises\.py failed: JSONDecodeError"):
        load(f"{tmp_path / 'raises.py'}:build")


def test_a_ref_prints_as_given() -> None:
    assert str(JobRef.parse(" jobs/a.py:build ")) == "jobs/a.py:build"
    assert JobRef.parse("jobs/a.py:build").is_file
    assert not JobRef.parse("pkg.mod:build").is_file


WINDOWED = [("window_start", "bigint"), ("resource", "string"), ("n", "bigint"),
            ("ids", "array<bigint>")]


@pytest.mark.parametrize(("schema", "streaming", "says"), [
    ([*WINDOWED[:3], ("ids", "array<string>")], True, "'ids' is array<string>, not "
                                                      "array<bigint>"),
    ([*WINDOWED, ("n", "int")], True, "two columns named n"),
    ([("ids", "array<bigint>")], True, "the result has only 'ids'"),
    (WINDOWED, False, "is not a streaming DataFrame"),
])
def test_outputs_pgval_cannot_judge_are_refused(job_file: Path, schema: list[tuple[str, str]],
                                                 streaming: bool, says: str) -> None:
    with pytest.raises(JobError) as err:
        check_output(load(f"{job_file}:unkeyed"), schema, streaming)
    assert says in str(err.value)


def test_an_output_without_ids_is_judged_by_its_rows(job_file: Path) -> None:
    """No ``ids``: not refused here; its key is every column (a verdict by rows)."""
    from pgval.topologies.job import has_ids

    assert check_output(load(f"{job_file}:unkeyed"), WINDOWED[:3]) == (
        "window_start", "resource", "n")
    assert not has_ids(WINDOWED[:3]) and has_ids(WINDOWED)


def test_the_key_of_an_output(job_file: Path) -> None:
    assert check_output(load(f"{job_file}:build"), WINDOWED) == ("window_start", "resource")
    assert check_output(load(f"{job_file}:unkeyed"),
                        [*WINDOWED[:3], ("ids", "array<int>")]) == (
        "window_start", "resource", "n")
    with pytest.raises(JobError, match="the key names window_start, which the result does "
                                       "not have"):
        check_output(load(f"{job_file}:build"), WINDOWED[1:])


def test_a_floating_point_column_in_an_undeclared_key_is_refused(job_file: Path) -> None:
    unkeyed = load(f"{job_file}:unkeyed")
    with pytest.raises(JobError, match="avg is floating-point: a sum or an average"):
        check_output(unkeyed, [("resource", "string"), ("avg", "double"),
                               ("ids", "array<bigint>")])
    keyed = load(f"{job_file}:build")  # build.key = window_start, resource: fine
    assert check_output(keyed, [("window_start", "timestamp"), ("resource", "string"),
                                ("avg", "double"), ("ids", "array<bigint>")]) == (
        "window_start", "resource")


def test_a_floating_point_column_in_a_declared_key_is_refused(job_file: Path) -> None:
    """A declared key of a double cannot identify an output: the stream and the batch may
    compute it apart in the last digits (it is compared as a value instead)."""
    keyed = load(f"{job_file}:build")  # build.key = window_start, resource
    with pytest.raises(JobError, match="build.key names resource, which is floating-point"):
        check_output(keyed, [("window_start", "timestamp"), ("resource", "double"),
                             ("ids", "array<bigint>")])
