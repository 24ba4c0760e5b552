"""The options of `validate`, `matrix` and `oir`, generated from the config dataclasses.

Every field of :class:`~pgval.core.spec.RunSpec` and of
:class:`~pgval.core.spec.ClusterSpec` is one option: its name from the field's
(``phase_seconds`` → ``--phase-seconds``, or ``metadata["name"]``), its type from the
annotation, its default from the dataclass, and its help, choices, metavar and bounds from
the field's metadata. So the commands cannot disagree on a default or lose an option: a
field is an option of every command unless that command names it, with the reason, in its
exclusion map. :func:`build_config` turns the parsed values back into the config.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from pgval.cli.errors import UserError
from pgval.config import resolve
from pgval.core.files import key_value_lines, split_key_value
from pgval.core.schema import (
    BUILTIN_TOPOLOGIES,
    FAULTS_AT_POINTS,
    PROCESSING_GUARANTEES,
    SINGLE_FAULTS,
    Fault,
    Name,
    Topology,
)
from pgval.core.spec import PROFILES, ClusterSpec, RunSpec, profile_settings

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

#: Fields that are an option of no command, and why.
NOT_OPTIONS: Mapping[str, str] = {
    "cluster": "its own fields are the options (--brokers, --workers, …)",
    "spark_daemon_conf": "set by the faults (lowered time-outs), not by users",
    "schedule": "set by --fault A+B, --schedule FILE or --fault random",
    "schedule_origin": "set with the schedule",
    "restart_policy": "decided from --restart and the fault when the spec is resolved",
    "resolved": "set when the spec is resolved",
}
#: Self-tests of pgval itself: options of `validate` only, never part of a measurement.
SELF_TESTS: Mapping[str, str] = {
    "sabotage": "a self-test of pgval, `validate` only",
    "late_events": "a self-test of pgval, `validate` only",
}
#: Fields each command does not take as options, and why (every other field is one).
EXCLUDED: Mapping[str, Mapping[str, str]] = {
    "validate": {},
    "matrix": {"topology": "a grid axis (--topologies)", "pg": "a grid axis (--pgs)",
               "fault": "a grid axis (--faults)",
               "crash_point": "part of the fault axis (--faults FAULT@POINT)",
               "schedule_file": "a schedule is one run's (validate --schedule)",
               "fault_count": "a random schedule is one run's (validate --fault random)",
               **SELF_TESTS},
    "oir": {"fault": "OIR trials run without a fault",
            "restart": "OIR trials run without a fault: nothing restarts",
            "restart_delay_s": "OIR trials run without a fault: nothing restarts",
            "rate": "the rate is what the search finds (--start-rate)",
            "schedule_file": "OIR trials run without a fault",
            "fault_count": "OIR trials run without a fault", **SELF_TESTS},
}
#: Options given as text although their field is a number: ``--rate`` also takes ``oir``,
#: which the command resolves to the stored optimum ingestion rate.
TEXT_OPTIONS: Mapping[str, str] = {"rate": "EVENTS/S|oir"}
#: The matrix's default faults: the paper's grid (driver-crash is pgval's addition).
MATRIX_FAULTS: tuple[Fault, ...] = (Fault.NONE, Fault.CRASH, Fault.DELAY_LT_TIMEOUT,
                                    Fault.DELAY_GT_TIMEOUT)


def option_fields() -> Iterator[tuple[dataclasses.Field[Any], Any]]:
    """``(field, resolved annotation)`` of every field that can be an option: the
    experiment's first, then the cluster's."""
    for cls in (RunSpec, ClusterSpec):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in NOT_OPTIONS:
                yield f, hints[f.name]


def option_name(f: dataclasses.Field[Any]) -> str:
    """``--phase-seconds`` for ``phase_seconds``, unless the field names its option."""
    return f.metadata.get("name") or "--" + f.name.replace("_", "-")


def field_option(f: dataclasses.Field[Any], hint: Any, required: bool = False) -> Decorator:
    """One field as a click option whose parameter name is the field's name; ``required``:
    the command cannot run without it (``check`` and ``oracle`` judge one topology)."""
    meta = f.metadata
    if not meta.get("help"):
        raise TypeError(f"config field {f.name} has no help text in its metadata")
    name = option_name(f)
    if "words" in meta:  # a number or one of a few words (``--target``)
        return click.option(name, f.name, type=IntOrWord(meta["words"], meta.get("min")),
                            default=f.default, help=meta["help"],
                            metavar=meta.get("metavar"), show_default=True)
    kind, optional = _unwrap(hint)
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
    if isinstance(default, Name):  # click shows an enum's member name, not its value
        default = default.value
    kw: dict[str, Any] = {"help": meta["help"], "show_default": True}
    if "metavar" in meta:
        kw["metavar"] = meta["metavar"]
    decls = [name]
    if f.name in TEXT_OPTIONS:
        kw.update(type=str, default=f"{default:g}", metavar=TEXT_OPTIONS[f.name])
    elif kind is bool and optional:  # unset means "pgval decides": an on/off pair
        decls = [f"{name}/--no-{name[2:]}"]
        kw.update(default=None, show_default=False)
    elif kind is bool:
        kw.update(is_flag=True, default=default)
    elif typing.get_origin(kind) is dict:
        kw.update(multiple=True, callback=key_values, show_default=False,
                  metavar=meta.get("metavar", "KEY=VALUE"))
    else:
        kw.update(type=_param_type(kind, meta), default=default)
    if required or meta.get("required"):
        # No default at all: click takes an explicit ``default=None`` for a given value.
        kw.pop("default", None)
        kw.update(required=True, show_default=False)
    elif meta.get("required_unless"):  # this or the other option: build_config checks
        kw.update(default=None, show_default=False,
                  help=f"{meta['help']} Required unless --{meta['required_unless']}.")
    return click.option(*decls, f.name, **kw)


def config_options(command: str) -> Decorator:
    """Every config field not in ``EXCLUDED[command]`` as an option, in field order."""
    excluded = EXCLUDED[command]
    names = {f.name for f, _ in option_fields()}
    if unknown := set(excluded) - names:
        raise TypeError(f"EXCLUDED[{command!r}] names no config field: {sorted(unknown)}")
    options = [field_option(f, hint) for f, hint in option_fields() if f.name not in excluded]
    return _stack(options)


def cluster_options() -> Decorator:
    """The cluster's fields alone (`pgval cluster up`); build with ``ClusterSpec(**kw)``."""
    names = {f.name for f in dataclasses.fields(ClusterSpec)}
    return _stack([field_option(f, hint) for f, hint in option_fields() if f.name in names])


def config_option(name: str, required: bool = False) -> Decorator:
    """The option of one config field, for commands that share only it (`check`, `oracle`)."""
    for f, hint in option_fields():
        if f.name == name:
            return field_option(f, hint, required=required)
    raise KeyError(name)


def profile_option() -> Decorator:
    """``--profile NAME``: a named set of defaults (:data:`pgval.core.spec.PROFILES`)."""
    shown = "; ".join(f"{name}: " + ", ".join(f"--{k.replace('_', '-')} {v:g}"
                                             for k, v in settings.items())
                      for name, settings in PROFILES.items())
    return click.option("--profile", type=click.Choice(sorted(PROFILES)), default=None,
                        help="Defaults for a purpose, each overridden by its own option "
                             f"where given ({shown}; in `matrix` also --repeat 1 --driver "
                             "shared). ci: a verdict in a CI budget, the warm-up still "
                             "until steady (docs/your-job.md, \"A CI profile\").")


def left_at_default(name: str) -> bool:
    """Whether the running command's option ``name`` was not given (click says which: an
    option given with its default value is given); outside a command, True."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source in (None, click.core.ParameterSource.DEFAULT)


def with_profile(values: Mapping[str, Any], profile: str | None) -> dict[str, Any]:
    """The parsed options with ``profile``'s settings in place of every option the user
    left at its default."""
    out = dict(values)
    for name, value in profile_settings(profile).items():
        if name in out and left_at_default(name):
            out[name] = f"{value:g}" if name in TEXT_OPTIONS else value
    return out


def build_config(values: Mapping[str, Any], **fixed: Any) -> RunSpec:
    """The config from a command's parsed config options (keys: field names), with
    ``fixed`` on top (grid axes, a resolved rate), checked by
    :func:`pgval.config.resolve`: a bad combination is one line (a user's mistake).
    Fields the command has no option for keep their dataclass default; without ``fault``
    (a matrix: the fault is an axis) what depends on the fault is checked per cell."""
    given = {**values, **fixed}
    given.update(_topology_or_job(given))
    exp = {f.name for f in dataclasses.fields(RunSpec)} - set(NOT_OPTIONS)
    clu = {f.name for f in dataclasses.fields(ClusterSpec)} - set(NOT_OPTIONS)
    if unknown := set(given) - exp - clu:
        raise TypeError(f"not config fields: {sorted(unknown)}")
    return resolve({**{k: v for k, v in given.items() if k in exp},
                    "cluster": ClusterSpec(**{k: v for k, v in given.items() if k in clu})},
                   fault_axis="fault" not in given)


def _topology_or_job(given: Mapping[str, Any]) -> dict[str, Any]:
    """``--topology`` or ``--job``, one of them (a command that takes ``--topology``):
    ``--job`` alone makes the topology ``job``; neither or both is one sentence."""
    if "topology" not in given:
        return {}
    topology = given["topology"] not in (None, Topology.JOB)
    job = given.get("job") is not None
    if topology == job:
        raise UserError("--topology and --job exclude each other: --job names your own job "
                        "in place of a built-in topology" if job else
                        "give --topology sst|mst, or --job PATH.py:FUNCTION for your own job")
    return {"topology": Topology.JOB} if job else {}


def list_option(name: str, allowed: Sequence[str], default: Sequence[str],
                help: str) -> Decorator:  # noqa: A002 - click's own word
    """A comma-separated list of ``allowed`` values (a grid axis), parsed into a list."""

    def parse(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
        items = [v.strip() for v in value.split(",") if v.strip()]
        bad = [v for v in items if v not in allowed]
        if bad or not items:
            raise UserError(f"{name} takes a comma-separated list of {', '.join(allowed)}; "
                            f"got {value!r}")
        return items

    return click.option(name, default=",".join(default), show_default=True, metavar="LIST",
                        callback=parse, help=f"{help} Comma-separated, of: {', '.join(allowed)}.")


def grid_options() -> Decorator:
    """`matrix`'s axes: --topologies, --pgs, --faults (choices from :mod:`pgval.core.schema`)."""
    return _stack([
        list_option("--topologies", BUILTIN_TOPOLOGIES, BUILTIN_TOPOLOGIES,
                    "Topologies of the grid (with --job: your job alone)."),
        list_option("--pgs", PROCESSING_GUARANTEES, PROCESSING_GUARANTEES,
                    "Processing guarantees (sinks) of the grid."),
        list_option("--faults", (*SINGLE_FAULTS, *FAULTS_AT_POINTS), MATRIX_FAULTS,
                    "Faults of the grid; FAULT@POINT runs a crash at that crash point."),
    ])


def key_values(ctx: click.Context, param: click.Parameter,
               values: tuple[str, ...]) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` into a dict (a later KEY wins); anything else is one line.
    ``@FILE`` reads KEY=VALUE lines from FILE (``#`` comments skipped): a password given
    that way stays off the command line (``pgval cluster status --json`` names the
    embedded Kafka's such file)."""
    out: dict[str, str] = {}
    for item, where in _expand_files(param, values):
        pair = split_key_value(item)
        if pair is None:
            # A line of a file is named, never shown: it may be `password: ...`.
            shown = where or repr(item)
            raise UserError(f"{param.opts[0]} takes KEY=VALUE, not {shown}")
        out[pair[0]] = pair[1]
    return out


def _expand_files(param: click.Parameter,
                  values: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """Each ``@FILE`` replaced by its non-blank, non-comment lines; with each item, where
    it came from (``line N of FILE``; None: the command line)."""
    out: list[tuple[str, str | None]] = []
    for item in values:
        if not item.startswith("@"):
            out.append((item, None))
            continue
        try:
            text = Path(item[1:]).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{param.opts[0]} {item}: cannot read {item[1:]} "
                            f"({getattr(exc, 'strerror', None) or exc})") from None
        out += [(line, f"line {n} of {item[1:]}") for n, line in key_value_lines(text)]
    return out


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """``(int, True)`` for ``int | None``; ``(T, False)`` for any other ``T``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"cannot make an option of {hint}")
        return args[0], True
    return hint, False


class FaultNames(click.Choice):
    """One fault, or several joined by ``+`` (``--fault crash+partition``): each checked
    against the choices, the text kept whole for the config to read as a schedule."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        text = str(value)
        if "+" not in text:
            return super().convert(value, param, ctx)
        names = [n.strip() for n in text.split("+")]
        for name in names:
            if name == "random" or name not in self.choices:
                self.fail(f"{name!r} in {text!r} is not a fault that can be combined; use "
                          f"names from {', '.join(c for c in self.choices if c != 'random')}",
                          param, ctx)
        return "+".join(names)


class IntOrWord(click.ParamType):
    """A whole number (at least ``min``) or one of ``words``: ``--target 1``, ``--target
    coordinator``."""

    name = "number or word"

    def __init__(self, words: Sequence[str], min: int | None = None) -> None:  # noqa: A002
        self.words = tuple(words)
        self.min = min

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or value in self.words:
            return value  # type: ignore[no-any-return]
        try:
            number = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a number nor one of {', '.join(self.words)}",
                      param, ctx)
        if self.min is not None and number < self.min:
            self.fail(f"{number} is below {self.min}", param, ctx)
        return number


def _param_type(kind: Any, meta: Mapping[str, Any]) -> click.ParamType:
    """The click type: a choice, a bounded int or float, or text."""
    if meta.get("composable"):
        return FaultNames(meta["choices"])
    if "choices" in meta:
        return click.Choice(meta["choices"])
    lo, hi = meta.get("min"), meta.get("max")
    if kind is int:
        return click.IntRange(lo, hi) if (lo, hi) != (None, None) else click.INT
    if kind is float:
        return click.FloatRange(lo, hi) if (lo, hi) != (None, None) else click.FLOAT
    if kind is str:
        return click.STRING
    raise TypeError(f"cannot make an option of {kind}")


def _stack(options: Sequence[Decorator]) -> Decorator:
    """Apply options so they appear in ``--help`` in the order given."""

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for o in reversed(options):
            f = o(f)
        return f

    return apply

