"""`pgval cluster up|status|down`: the embedded Kafka + Spark cluster by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pgval.cli.common import console, print_json, require_spark
from pgval.cli.errors import UserError
from pgval.cli.options import cluster_options


@click.group()
def cluster() -> None:
    """Start, inspect and stop the embedded Kafka + Spark cluster by hand."""


def _cluster_dir(f):  # noqa: ANN001, ANN202 - click decorator
    return click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
                        default=Path("runs/cluster"), show_default=True,
                        help="The cluster's directory: state, logs, broker data.")(f)


@cluster.command("up")
@_cluster_dir
@cluster_options()
def cluster_up(run_dir: Path, **values: Any) -> None:
    """Start the cluster and leave it running (stop it with `pgval cluster down`)."""
    from pgval.cluster.guard import read_state
    from pgval.cluster.local import LocalCluster
    from pgval.core.spec import ClusterSpec

    require_spark()
    if (read_state(run_dir) or {}).get("complete"):
        raise UserError(f"a cluster is already up in {run_dir}; run `pgval cluster down` first")
    c = LocalCluster(run_dir, ClusterSpec(**values), held=True)
    with console.status("starting Kafka and Spark…"):
        c.start()
    info = c.describe()
    console.print(f"Kafka {info['bootstrap']}  Spark {info['master']}  "
                  f"(up in {info['timings']['cluster_start_s']:.1f} s, state in {run_dir})")


@cluster.command("status")
@_cluster_dir
@click.option("--json", "as_json", is_flag=True,
              help="Print bootstrap, master, the Spark settings a driver on this machine "
                   "needs and the processes, for `pgval validate --deploy external`.")
def cluster_status(run_dir: Path, as_json: bool) -> None:
    """Show what the cluster in RUN_DIR is and whether its processes are alive."""
    from pgval.cluster.guard import cluster_processes, read_state
    from pgval.deploy.embedded import handoff

    state = read_state(run_dir)
    if as_json:
        if state is None:
            raise UserError(f"no cluster in {run_dir}")
        print_json(handoff(run_dir, state))
        return
    if state is None:
        console.print(f"no cluster in {run_dir}")
        return
    console.print(f"Kafka {state.get('bootstrap')}  Spark {state.get('master')}  "
                  f"isolated={state.get('isolated')}")
    for name, alive in cluster_processes(run_dir):
        console.print(f"  {name:24} {'[green]up[/]' if alive else '[red]down[/]'}")


@cluster.command("down")
@_cluster_dir
def cluster_down(run_dir: Path) -> None:
    """Stop the cluster in RUN_DIR (safe to run twice)."""
    from pgval.cluster.guard import force_down

    stopped = force_down(run_dir)
    console.print(f"stopped {len(stopped)} process groups/namespaces" if stopped
                  else "nothing was running")


@cluster.group("broker")
def cluster_broker() -> None:
    """Crash and restart one Kafka broker of a running cluster (a broker-crash by hand, or
    the nemesis of `pgval validate --deploy external --fault broker-crash`)."""


def _brokers(run_dir: Path) -> Any:
    from pgval.cluster.brokers import RecordedBrokers

    return RecordedBrokers.of_cluster(run_dir)


@cluster_broker.command("kill")
@_cluster_dir
@click.argument("broker", type=click.IntRange(min=0))
def cluster_broker_kill(run_dir: Path, broker: int) -> None:
    """SIGKILL broker BROKER's process group (no controlled shutdown)."""
    pid = _brokers(run_dir).kill_node(broker)
    console.print(f"killed Kafka broker {broker} (pid {pid})" if pid is not None
                  else f"Kafka broker {broker} was not running")


@cluster_broker.command("start")
@_cluster_dir
@click.argument("broker", type=click.IntRange(min=0))
def cluster_broker_start(run_dir: Path, broker: int) -> None:
    """Start broker BROKER again (its ports, data and settings) and wait until the cluster
    lists it; nothing to do if it runs."""
    pid = _brokers(run_dir).restart_node(broker)
    console.print(f"Kafka broker {broker} is running (pid {pid})")
