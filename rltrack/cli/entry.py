"""The `rltrack` command: run directories from a shell.

    rltrack show RUN_DIR                                  status and last values
    rltrack status [--json]                               the agent: pid, uptime, each run it serves and its backlog, its last death
    rltrack agent                                         run the agent in the foreground (containers, debugging)
    rltrack agent stop [--now]                            end the agent after it stored what it holds (or at once)
    rltrack sync RUN_DIR [--to BACKEND ...] [--config F] [--timeout S]  deliver to trackers afterwards
    rltrack import neptune PATH [--root DIR]              Neptune offline folders -> run directories
    rltrack import tensorboard PATH [--root DIR]          folders of TensorBoard event files -> run directories
    rltrack pull URI [DIR]                                the runs agents mirrored to storage (run.storage) -> run directories
    rltrack deliver URI [--share K/N] [--once]            the trackers of run.delivery = "from-storage" runs, fed from storage
    rltrack run [--config F] [--name N] -- python x.py    a script's TensorBoard writers into the trackers
    rltrack plot --metric KEY RUN_PATTERN... -o out.png   a metric across runs, mean and 95% band per group
    rltrack report RUN... [--task T] [--where Q] -o p.html  one run as a page, or several compared on one
    rltrack compare [RUN...] --metric KEY [--group-by K]  which group is better: IQM, median, mean, gap with bootstrap intervals

This module only parses arguments; the work is done in `rltrack.cli.sync_command` and
`rltrack.importers`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from rltrack.sinks.tables import format_table
from rltrack.training.config import ConfigError
from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.journal import journal_files, parse_line
from rltrack.core.report import Report
from rltrack.cli.runs_command import local_root_argument, root_argument
from rltrack.cli.sync_command import DEFAULT_TIMEOUT, SyncError
from rltrack.cli.sync_command import sync as sync_run
from rltrack.core.version import __version__


#: `show` reads a journal line at most this long; a longer one (a damaged file) is skipped, never held whole.
MAX_SHOWN_LINE = 16 * 1024 * 1024
#: `show` prints at most this many characters of a key or value, then says how long it was.
MAX_SHOWN_TEXT = 200


def show(run_dir: Path) -> int:
    """Status and the last value of every metric, for every directory `rltrack
    runs show` reads (rltrack's own, SB3, Tune, SpinningUp, DI-engine); for
    rltrack's own also the journal's size and report.json."""
    from rltrack.runs.run import open_run

    try:
        run = open_run(run_dir)
    except ValueError as exc:
        print(f"rltrack: {exc}", file=sys.stderr)
        return 2
    print(f"{run_dir.name}: {run.status}, started {run.start_time.isoformat(timespec='seconds')} on {run.host} ({run.writer} format)")
    if run.writer == "rltrack":  # the journal read in bounded pieces: a damaged one never crashes `show` nor fills memory
        events, newest, skipped = _scan_journals(run_dir)
        print(f"{events} events in the journal")
        for reason, count in skipped.items():
            print(f"{count} {reason} skipped")
        last = {key: value for key, (_, value) in newest.items()}
    else:
        last = {key: summary["final"] for key, summary in run.summary.items()}
    if last:
        print(format_table("last values", {_cut(key): _cut(value) for key, value in last.items()}))
    if run.writer == "rltrack":
        summary = Report.load(run_dir / "report.json").summary()
        print(f"report.json:\n{summary}" if summary else "report.json: nothing renamed, converted or dropped")
    return 0


def _scan_journals(run_dir: Path) -> tuple[int, dict[str, tuple[float, object]], Counter[str]]:
    """The events of every journal of the run, the newest value of each scalar
    (by event time, across writers), and the lines skipped by reason: a line
    that is not an event (garbage bytes, a torn tail) or longer than
    `MAX_SHOWN_LINE`, which is read past in pieces, never whole."""
    events, last, skipped = 0, {}, Counter[str]()
    for path in journal_files(run_dir).values():
        with path.open("rb") as f:
            while line := f.readline(MAX_SHOWN_LINE):
                if len(line) == MAX_SHOWN_LINE and not line.endswith(b"\n"):
                    while (rest := f.readline(MAX_SHOWN_LINE)) and not rest.endswith(b"\n"):
                        pass
                    skipped[f"journal lines over {MAX_SHOWN_LINE // 2**20} MiB"] += 1
                    continue
                if not line.strip():
                    continue
                try:
                    entry = parse_line(line)
                except (KeyError, ValueError, TypeError, AttributeError):  # UnicodeDecodeError is a ValueError
                    skipped["journal lines that are not events"] += 1
                    continue
                if type(entry) is not Event:
                    continue
                events += 1
                if entry.kind in NUMERIC_KINDS:
                    for key, value in entry.data.items():
                        tag = entry.tag(key)
                        if tag not in last or last[tag][0] <= entry.time:
                            last[tag] = (entry.time, value)
    return events, last, skipped


def _cut(value: object) -> object:
    """A string cut to `MAX_SHOWN_TEXT` characters, saying how long it was; other values as they are."""
    if isinstance(value, str) and len(value) > MAX_SHOWN_TEXT:
        return f"{value[:MAX_SHOWN_TEXT]}... ({len(value)} characters)"
    return value


def status(as_json: bool) -> int:
    """The agent of this environment: pid, uptime, and per run it serves, each tracker's backlog and last error."""
    from rltrack.agent.files import STATUS, agent_dir, agent_running, describe_death, last_death, read_json
    from rltrack.agent.process import IDLE_EXIT
    from rltrack.cli.agent_command import HOW_TO_STOP

    directory = agent_dir()
    running = agent_running(directory)
    saved = read_json(directory / STATUS) or {}
    agent = read_json(directory / "agent.json") or {}
    runs = saved.get("runs", []) if running else []
    death = last_death(directory)
    if as_json:
        print(json.dumps({"running": running, "directory": str(directory), "pid": agent.get("pid") if running else None,
                          "uptime": time.time() - agent["started"] if running and "started" in agent else None, "runs": runs,
                          "queued": saved.get("queued", 0) if running else 0, "last_death": death, "idle_exit": IDLE_EXIT, "stop": HOW_TO_STOP}, indent=2))
        return 0
    if death is not None:
        print(f"last death: {describe_death(death)} (see {directory / 'agent.log'})")
    if not running:
        print(f"no agent runs for {directory} (the first logger that needs one starts it)")
        return 0
    print(f"agent pid {agent.get('pid')}, up {time.time() - agent.get('started', time.time()):.0f} s, serving {len(runs)} writer(s) ({directory})")
    print(f"it exits by itself after {IDLE_EXIT:.0f} s with nothing to serve; to stop it sooner: {HOW_TO_STOP}")
    if saved.get("queued"):
        print(f"{saved['queued']} more writer(s) wait their turn: the agent holds at most {saved.get('budget')} descriptors for runs (its descriptor limit, `ulimit -n`)")
    rows = [("run", "writer", "status", "tracker", "pending bytes", "last error")]
    for run in runs:
        trackers = run.get("trackers") or {"-": {}}
        for name, info in trackers.items():
            rows.append((run["run_dir"], run.get("writer") or "-", run.get("status") or "running", name,
                         str(info.get("pending_bytes", "-")), (info.get("last_error") or "") + (f" (retrying cannot help: {info['fix']})" if info.get("fix") else "")))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def sync(run_dir: Path, to: list[str] | None, config: Path | None, force: bool, timeout: float) -> int:
    try:
        complete = sync_run(run_dir, to, config, force, timeout=timeout)
    except (SyncError, ConfigError) as exc:
        print(f"rltrack sync: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nrltrack sync: interrupted; what was delivered is kept, run it again to continue", file=sys.stderr)
        return 130
    return 0 if complete else 1


def import_runs(what: str, path: Path, root: Path) -> int:
    """`rltrack import neptune|tensorboard PATH`: the run directories made, one a line."""
    try:
        module = importlib.import_module(f"rltrack.importers.{what}")
    except ImportError as exc:
        print(f"rltrack import {what}: not available in this installation ({exc})", file=sys.stderr)
        return 2
    try:
        run_dirs = module.import_folder(path, root)
    except (OSError, ValueError) as exc:
        print(f"rltrack import {what}: {exc}", file=sys.stderr)
        return 2
    for run_dir in run_dirs:
        print(run_dir)
    if run_dirs:
        print("deliver with: rltrack sync <run dir> --to mlflow (or wandb, trackio, neptune)", file=sys.stderr)
    return 0


def pull_runs(uri: str, into: Path) -> int:
    from rltrack.runs.storage_root import PullError, pull

    try:
        run_dirs = pull(uri, into)
    except (PullError, ImportError, OSError) as exc:
        print(f"rltrack pull: {exc}", file=sys.stderr)
        return 2
    for run_dir in run_dirs:
        print(run_dir)
    print(f"{len(run_dirs)} run(s) from {uri} in {into}", file=sys.stderr)
    return 0


def deliver_runs(uri: str, share: str, config: Path | None, once: bool) -> int:
    from rltrack.cli.deliver_command import deliver, parse_share
    from rltrack.runs.storage_root import PullError

    try:
        return deliver(uri, parse_share(share), config, once)
    except (PullError, ImportError, ConfigError, ValueError) as exc:
        print(f"rltrack deliver: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nrltrack deliver: interrupted; what was delivered is kept (cursors in the copy), run it again to continue", file=sys.stderr)
        return 130


def figure_command(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A handler that imports `module` (numpy, matplotlib: the `runs` extra) only when run."""

    def handler(args: argparse.Namespace) -> int:
        try:
            command = getattr(importlib.import_module(module), function)
        except ImportError as exc:
            print(f"rltrack {args.command}: a package is missing ({exc}); install the extra: pip install 'rltrack[runs]'", file=sys.stderr)
            return 2
        return int(command(args))

    return handler


def add_figure_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`rltrack plot` (a metric across runs, rltrack.runs.plot) and `rltrack report` (rltrack.runs.report)."""
    plot_cmd = commands.add_parser(
        "plot",
        help="a metric across runs: per group of runs, the mean over seeds with a 95%% confidence band, as a PNG",
        description="One line per group of runs (groups by hyperparameters), the mean over the group's runs with a "
        "shaded 95% t-interval; runs are aligned on a common x grid by linear interpolation (no extrapolation).",
    )
    plot_cmd.add_argument("patterns", nargs="+", metavar="RUN_PATTERN", help="a run directory, or a regex searched in the run ids and folder paths under --root")
    plot_cmd.add_argument("--metric", required=True, help="the metric's key, e.g. collector/reward_mean (canonical names work across frameworks)")
    plot_cmd.add_argument("--x", metavar="AXIS", help="x axis: a step axis such as env_steps or train_iter, or 'time' (default: each run's primary step)")
    plot_cmd.add_argument("--group-by", metavar="KEYS", help="comma-separated hyperparameters (or source, task, host) defining groups "
                          "(default: the hyperparameters every run has that differ between them, seeds excepted; source across frameworks)")
    plot_cmd.add_argument("--smooth", type=int, default=1, metavar="N", help="trailing moving average over N points of each run first (default 1: none)")
    plot_cmd.add_argument("--size", default="960x600", metavar="WxH", help="image size in pixels (default 960x600; the height grows for a legend of many groups)")
    plot_cmd.add_argument("-o", "--output", type=Path, required=True, help="the PNG file to write")
    plot_cmd.add_argument("--root", type=root_argument, default=Path("runs"), help="the runs root holding the index (default: runs; a storage URI is read from storage)")
    plot_cmd.set_defaults(handler=figure_command("rltrack.cli.plot_command", "plot_command"))
    report_cmd = commands.add_parser(
        "report", help="a self-contained HTML page: one run (config, summary, plots, timings, checkpoints), or several "
        "compared (groups, mean over seeds with a band, the hyperparameters that differ, a summary table)"
    )
    report_cmd.add_argument("runs", nargs="*", metavar="RUN", help="a run directory, or a regex searched in the run ids and folder paths under --root")
    report_cmd.add_argument("--task", help="the runs of a task (glob patterns such as 'cartpole*' work)")
    report_cmd.add_argument("--where", metavar="EXPR", help="the runs a query selects, as `rltrack runs ls --where`")
    report_cmd.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    report_cmd.add_argument("--root", type=root_argument, default=Path("runs"), help="the runs root holding the index (default: runs; a storage URI is read from storage)")
    report_cmd.set_defaults(handler=figure_command("rltrack.cli.report_command", "report_command"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rltrack", description="Work with rltrack run directories.")
    parser.add_argument("--version", action="version", version=f"rltrack {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    show_cmd = commands.add_parser("show", help="status and last values of a run")
    show_cmd.add_argument("run_dir", type=Path)
    sync_cmd = commands.add_parser(
        "sync", help="deliver what trackers have not received (after a crash or outage), or replay a run into another tracker"
    )
    sync_cmd.add_argument("run_dir", type=Path)
    sync_cmd.add_argument(
        "--to", action="extend", nargs="+", metavar="BACKEND", help="trackers to deliver to (default: those the run used)"
    )
    sync_cmd.add_argument("--config", type=Path, metavar="FILE", help="TOML/YAML config with the trackers' settings (default: the run's own)")
    sync_cmd.add_argument("--force", action="store_true", help="sync a run marked running whose process looks alive")
    sync_cmd.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help=f"stop retrying a tracker that still fails after SECONDS (default {DEFAULT_TIMEOUT:g}; inf: no limit)",
    )  # fmt: skip
    status_cmd = commands.add_parser("status", help="the delivery agent: pid, uptime, each run it serves with its backlog per tracker")
    status_cmd.add_argument("--json", action="store_true", help="as JSON")
    import_cmd = commands.add_parser("import", help="turn another tool's saved runs into rltrack run directories")
    import_cmd.add_argument(
        "format", choices=["neptune", "tensorboard"],
        help="neptune: Neptune 1.x .neptune/offline and .neptune/async folders; tensorboard: folders of event files "
        "(CleanRL's runs/<run_name>, Tianshou's log/, DI-engine experiments), each found under PATH one run",
    )
    import_cmd.add_argument("path", type=Path)
    import_cmd.add_argument("--root", type=local_root_argument, default=Path("runs"), help="where to create the run directories (default: runs)")
    deliver_cmd = commands.add_parser("deliver", help='deliver the runs under a storage URI to their trackers (run.delivery = "from-storage")')
    deliver_cmd.add_argument("uri", help="the storage URI the nodes mirror to (run.storage)")
    deliver_cmd.add_argument("--share", default="0/1", metavar="K/N", help="deliver only the runs whose path hashes to K modulo N (one of N deliverers; default 0/1: all)")
    deliver_cmd.add_argument("--config", type=Path, metavar="FILE", help="TOML/YAML config with the trackers' settings (default: each run's own)")
    deliver_cmd.add_argument("--once", action="store_true", help="one round: deliver what storage holds now, then exit (1 if a tracker still lacks some of it)")
    pull_cmd = commands.add_parser("pull", help="rebuild the run directories a storage URI holds (what agents mirrored there with run.storage)")
    pull_cmd.add_argument("uri", help="a storage URI, e.g. s3://bucket/prefix or file:///shared/runs")
    pull_cmd.add_argument("dir", nargs="?", type=local_root_argument, default=Path("runs"), help="where to rebuild them (default: runs)")
    from rltrack.cli.runs_command import add_commands as add_runs_commands
    from rltrack.cli.runs_command import dash_values

    add_runs_commands(commands)  # runs ls/show/rm/archive/index, export: each sets a handler
    add_figure_commands(commands)  # plot, report
    from rltrack.cli.compare_command import add_command as add_compare_command

    add_compare_command(commands)  # compare: sets a handler
    from rltrack.cli.run_command import add_command as add_run_command

    add_run_command(commands)  # run: sets a handler
    from rltrack.cli.agent_command import add_command as add_agent_command

    add_agent_command(commands)  # agent, agent stop: sets a handler

    from rltrack.cli.examples import add_examples

    add_examples(parser)  # every subcommand's --help ends with an example
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv if argv[:1] == ["run"] else dash_values(argv))  # a command's own arguments are left as given
    if hasattr(args, "handler"):
        from rltrack.runs.index import RootError

        try:
            return int(args.handler(args))
        except RootError as exc:
            print(f"rltrack {args.command}: {exc}", file=sys.stderr)
            return 2
    if args.command == "sync":
        return sync(args.run_dir, args.to, args.config, args.force, args.timeout)
    if args.command == "import":
        return import_runs(args.format, args.path, args.root)
    if args.command == "pull":
        return pull_runs(args.uri, args.dir)
    if args.command == "deliver":
        return deliver_runs(args.uri, args.share, args.config, args.once)
    if args.command == "status":
        return status(args.json)
    return show(args.run_dir)
