"""One option set: `validate`, `matrix` and `oir` take their options from the config fields,
with one default each, help everywhere, and docs/cli.md rendered from `--help`.

Nothing here starts a cluster: parsing is checked with ``make_context`` and mistakes are
refused before any run directory or database exists.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pgval.cli import docs as cli_docs
from pgval.cli import main
from pgval.cli.options import (
    EXCLUDED,
    NOT_OPTIONS,
    build_config,
    option_fields,
    with_profile,
)
from pgval.core.errors import UserMistake
from pgval.core.spec import PROFILES, ClusterSpec, RunSpec

ROOT = Path(__file__).resolve().parent.parent
RUN_COMMANDS = ("validate", "matrix", "oir")


def _all_commands() -> list[tuple[str, click.Command]]:
    out = []

    def walk(cmd: click.Command, path: str) -> None:
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")

    walk(main, "pgval")
    return out


def _options(command: str) -> dict[str, click.Option]:
    """Parameter name → option of ``pgval COMMAND``."""
    cmd = main.commands[command]
    return {p.name: p for p in cmd.params if isinstance(p, click.Option)}


def _parse(command: str, args: list[str]) -> dict[str, object]:
    """What ``pgval COMMAND ARGS`` would be called with (callbacks run, command does not)."""
    cmd = main.commands[command]
    root = click.Context(main, info_name="pgval", **main.context_settings)  # -h, as in pgval
    with cmd.make_context(command, args, parent=root) as ctx:
        return dict(ctx.params)


def _config_values(params: dict[str, object]) -> dict[str, object]:
    names = {f.name for f, _ in option_fields()}
    return {k: v for k, v in params.items() if k in names}


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_line_error(res: click.testing.Result, needle: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit | None)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert needle in lines[0], res.output


def test_every_option_and_command_has_help() -> None:
    missing = [f"{path} {p.opts[0]}" for path, cmd in _all_commands() for p in cmd.params
               if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert not missing, f"options without help: {missing}"
    bare = [path for path, cmd in _all_commands() if not (cmd.help or "").strip()]
    assert not bare, f"commands without help: {bare}"


@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_every_config_field_is_an_option_or_excluded_with_a_reason(command: str) -> None:
    options = _options(command)
    excluded = EXCLUDED[command]
    for cls in (RunSpec, ClusterSpec):
        for f in dataclasses.fields(cls):
            if f.name in NOT_OPTIONS:
                assert f.name not in options
            elif f.name in excluded:
                assert f.name not in options and excluded[f.name].strip()
            else:
                assert f.name in options, f"{command} lost --{f.name.replace('_', '-')}"


def test_one_default_per_option_and_it_is_the_config_default() -> None:
    per_command = {c: _options(c) for c in RUN_COMMANDS}
    exp, clu = RunSpec(), ClusterSpec()
    for f, _ in option_fields():
        defaults = {c: opts[f.name].default for c, opts in per_command.items()
                    if f.name in opts}
        assert len(set(map(repr, defaults.values()))) <= 1, (f.name, defaults)
        want = getattr(exp if hasattr(exp, f.name) else clu, f.name)
        for c, default in defaults.items():
            opt = per_command[c][f.name]
            if opt.required or f.metadata.get("required_unless"):  # --topology or --job
                assert default is None
            elif f.name == "rate":
                assert float(default) == want
            elif opt.multiple:
                assert want == {}
            else:
                assert default == want, (c, f.name, default, want)
    for c in RUN_COMMANDS:  # the paper's phase length everywhere (matrix and oir had 30 s)
        assert per_command[c]["phase_seconds"].default == 90.0


@pytest.mark.parametrize("command", ["matrix", "oir"])
def test_matrix_and_oir_take_the_options_validate_has(command: str) -> None:
    opts = _options(command)
    for name in ("partitions", "producers", "isolate", "target", "deploy", "bootstrap",
                 "master", "kafka_config", "spark_conf", "nemesis_inject", "nemesis_remove",
                 "keep_topics", "running_cluster", "prime_events", "drain_timeout_s"):
        assert name in opts, name
    assert "--cluster" in opts["running_cluster"].opts
    assert opts["isolate"].secondary_opts == ["--no-isolate"]
    assert not {"sabotage", "late_events"} & set(opts)


def test_matrix_options_reach_the_config() -> None:
    params = _parse("matrix", ["--partitions", "5", "--producers", "2", "--no-isolate",
                               "--target", "1", "--deploy", "compose", "--topologies", "mst",
                               "--pgs", "e1", "--faults", "none,crash"])
    assert (params["topologies"], params["pgs"], params["faults"]) == (["mst"], ["e1"],
                                                                       ["none", "crash"])
    cfg = build_config(_config_values(params), rate=100.0)
    assert (cfg.cluster.partitions, cfg.producers, cfg.cluster.isolate, cfg.target,
            cfg.deploy) == (5, 2, False, 1, "compose")
    assert (cfg.phase_seconds, cfg.cluster.spark_daemon_conf) == (90.0, {})


@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_job_and_sink_reach_every_run_commands_config(command: str) -> None:
    """`--job` (and `--sink`) in validate, matrix and oir: the topology becomes `job`."""
    args = ["--job", "/jobs/j.py:build", "--sink", "files"]
    params = _parse(command, args)
    fixed: dict[str, object] = {"rate": 100.0}
    if command == "matrix":
        fixed["topology"] = "job"  # as the command does: the grid's topology axis is the job
    if command == "oir":
        fixed.pop("rate")
        fixed["fault"] = "none"
    cfg = build_config(_config_values(params), **fixed)
    assert (cfg.topology, cfg.job, cfg.sink) == ("job", "/jobs/j.py:build", "files")


def test_repeated_key_values_become_a_dict() -> None:
    params = _parse("validate", ["--topology", "sst", "--deploy", "external",
                                 "--bootstrap", "k:9092", "--master", "spark://m:7077",
                                 "--kafka-config", "a=b", "--kafka-config", "c=d=e",
                                 "--spark-conf", "spark.x=1"])
    assert params["kafka_config"] == {"a": "b", "c": "d=e"}
    assert params["spark_conf"] == {"spark.x": "1"}
    cfg = build_config(_config_values(params), rate=100.0)
    assert cfg.kafka_config == {"a": "b", "c": "d=e"} and cfg.master == "spark://m:7077"
    assert _parse("oir", ["--topology", "sst"])["kafka_config"] == {}


def test_key_values_from_a_file_keep_a_password_off_the_command_line(cwd: Path) -> None:
    """``--kafka-config @FILE`` (what `cluster status --json` names for the embedded
    Kafka's login) reads KEY=VALUE lines; later options still win; a file that cannot be
    read is one line."""
    login = cwd / "login.properties"
    login.write_text("# the cluster's login\nsecurity.protocol=SASL_PLAINTEXT\n\n"
                     "sasl.password=p=q\n")
    params = _parse("validate", ["--topology", "sst", "--deploy", "external",
                                 "--bootstrap", "k:9092", "--master", "spark://m:7077",
                                 "--kafka-config", f"@{login}", "--kafka-config",
                                 "security.protocol=SASL_SSL"])
    assert params["kafka_config"] == {"security.protocol": "SASL_SSL", "sasl.password": "p=q"}
    res = CliRunner().invoke(main, ["validate", "--topology", "sst", "--kafka-config",
                                    f"@{cwd / 'missing'}"])
    _one_line_error(res, "cannot read")
    # A Java-style line (`key: value`) is refused by its place, never echoed.
    login.write_text("security.protocol=SASL_PLAINTEXT\nsasl.password: hunter2-secret\n")
    res = CliRunner().invoke(main, ["validate", "--topology", "sst", "--deploy", "external",
                                    "--kafka-config", f"@{login}"])
    _one_line_error(res, f"--kafka-config takes KEY=VALUE, not line 2 of {login}")
    assert "hunter2" not in res.output


@pytest.mark.parametrize("command", [["validate", "--topology", "sst"], ["matrix"],
                                     ["oir", "--topology", "mst"]])
def test_a_malformed_key_value_is_one_line(cwd: Path, command: list[str]) -> None:
    res = CliRunner().invoke(main, [*command, "--spark-conf", "x"])
    _one_line_error(res, "--spark-conf takes KEY=VALUE, not 'x'")
    res = CliRunner().invoke(main, [*command, "--kafka-config", "=v"])
    _one_line_error(res, "--kafka-config takes KEY=VALUE")
    assert os.listdir(cwd) == []


@pytest.mark.parametrize(("args", "needle"), [
    (["validate", "--topology", "sst", "--kafka-config", "a=b"],
     "--kafka-config only apply to --deploy external"),
    (["validate", "--topology", "sst", "--deploy", "external"], "needs --bootstrap"),
    (["oir", "--topology", "sst", "--nemesis-inject", "x"], "only apply to --deploy external"),
    (["validate", "--topology", "sst", "--target", "2"], "--target must be a worker index"),
    (["matrix", "--faults", "none,delay-lt-timeout", "--no-isolate"],
     "needs workers in their own network namespaces"),
    (["matrix", "--pgs", "a1,x1"], "--pgs takes a comma-separated list of a1, e1, m1"),
    (["validate", "--topology", "sst", "--rate", "fast"], "--rate must be a number"),
    (["validate"], "give --topology sst|mst, or --job PATH.py:FUNCTION"),
    (["oir"], "give --topology sst|mst, or --job PATH.py:FUNCTION"),
    (["validate", "--topology", "sst", "--job", "j.py:build"], "exclude each other"),
    (["validate", "--job", "nothing.py:build"], "no such file nothing.py"),
    (["validate", "--job", "j.py"], "expected PATH.py:FUNCTION or package.module:FUNCTION"),
    (["matrix", "--job", "j.py:build", "--topologies", "sst"],
     "--topologies and --job exclude each other"),
    (["validate", "--job", "j.py:build", "--deploy", "compose"],
     "--job runs on the embedded cluster or --deploy external"),
    (["validate", "--job", "j.py:build", "--window-ms", "3600000"],
     "with --job at most 1800000"),
])
def test_a_refused_combination_is_one_line_before_anything_exists(
        cwd: Path, args: list[str], needle: str) -> None:
    _one_line_error(CliRunner().invoke(main, args), needle)
    assert os.listdir(cwd) == []  # not even the results database


def test_a_job_that_does_not_load_is_one_line_before_anything_exists(cwd: Path) -> None:
    (cwd / "broken.py").write_text("def build(spark, sources):\n    return (\n")
    (cwd / "no_build.py").write_text("x = 1\n")
    for args, needle in ((["validate", "--job", "broken.py:build"], "broken.py line 2"),
                         (["matrix", "--job", "no_build.py:build"], "has no build")):
        _one_line_error(CliRunner().invoke(main, args), needle)
    assert sorted(os.listdir(cwd)) == ["__pycache__", "broken.py", "no_build.py"] or sorted(
        os.listdir(cwd)) == ["broken.py", "no_build.py"]


def test_self_tests_are_validate_only() -> None:
    for command in ("matrix", "oir"):
        res = CliRunner().invoke(main, [command, "--sabotage", "drop-batch:1"])
        assert res.exit_code == 2 and "No such option" in res.output, res.output
        assert "--sabotage" in res.output
    res = CliRunner().invoke(main, ["oir", "--topology", "sst", "--fault", "crash"])
    assert res.exit_code == 2 and "No such option" in res.output and "--fault" in res.output


def test_docs_cli_md_is_up_to_date() -> None:
    """Rendered by the refresh command itself, in a fresh process (click caches each
    command's help option, so an earlier parse in this process could change it)."""
    fresh = subprocess.run([sys.executable, "-m", "pgval.cli.docs"], cwd=ROOT, check=True,
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "37"}).stdout
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == fresh, (
        f"docs/cli.md is out of date with the commands' --help; refresh it with "
        f"`{cli_docs.REFRESH}` and commit it")
    assert "(docs/cli.md)" in (ROOT / "README.md").read_text()


def _profiled(command: str, args: list[str]) -> RunSpec:
    """The config ``pgval COMMAND ARGS`` would run, its --profile applied."""
    cmd = main.commands[command]
    root = click.Context(main, info_name="pgval", **main.context_settings)
    with cmd.make_context(command, args, parent=root) as ctx:
        values = with_profile(_config_values(dict(ctx.params)), ctx.params["profile"])
        return build_config(values, rate=float(values["rate"]),
                            **({"topology": "sst"} if command == "matrix" else {}))


@pytest.mark.parametrize("command", ["validate", "matrix"])
def test_a_profile_sets_defaults_and_every_option_given_wins(command: str) -> None:
    """--profile ci replaces the defaults it names, not what the user wrote, even a value
    equal to the default (--rate 2000)."""
    topology = ["--topology", "sst"] if command == "validate" else []
    ci = _profiled(command, [*topology, "--profile", "ci"])
    want = PROFILES["ci"]
    assert (ci.phase_seconds, ci.rate, ci.cluster.brokers, ci.prime_events,
            ci.warmup_max_seconds, ci.drain_timeout_s) == (
        want["phase_seconds"], want["rate"], want["brokers"], want["prime_events"],
        want["warmup_max_seconds"], want["drain_timeout_s"])
    assert ci.warmup_seconds == RunSpec().warmup_seconds  # still until steady
    given = _profiled(command, [*topology, "--profile", "ci", "--phase-seconds", "20",
                                "--rate", "2000", "--brokers", "3"])
    assert (given.phase_seconds, given.rate, given.cluster.brokers) == (20.0, 2000.0, 3)
    assert given.prime_events == want["prime_events"]
    plain = _profiled(command, topology)
    assert (plain.phase_seconds, plain.rate) == (90.0, 2000.0)


def test_a_profile_in_the_api_is_the_clis() -> None:
    from pgval import api

    spec = api.run_spec(profile="ci", topology="sst", phase_seconds=20)
    assert (spec.phase_seconds, spec.rate, spec.cluster.brokers) == (20.0, 500.0, 1)
    with pytest.raises(UserMistake, match="unknown profile 'fast'"):
        api.run_spec(profile="fast", topology="sst")


def test_a_ci_matrix_runs_each_cell_once_on_a_shared_driver_unless_told() -> None:
    from pgval.cli.campaigns import PROFILE_DRIVER, PROFILE_REPEAT, _profiled

    cmd = main.commands["matrix"]
    root = click.Context(main, info_name="pgval", **main.context_settings)
    for args, want in ((["--profile", "ci"], (1, "shared")),
                       (["--profile", "ci", "--repeat", "3", "--driver", "fresh"],
                        (3, "fresh")),
                       ([], (3, "fresh"))):
        with cmd.make_context("matrix", args, parent=root) as ctx:
            p = ctx.params
            got = (_profiled(p["profile"], "repeat", p["repeat"], PROFILE_REPEAT),
                   _profiled(p["profile"], "driver", p["driver"], PROFILE_DRIVER))
        assert got == want, args
