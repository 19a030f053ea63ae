"""The `rltrack` command: run directories from a shell.

    rltrack show RUN_DIR                                  status and last values
    rltrack status [--json]                               the agent: pid, uptime, each run it serves and its backlog
    rltrack agent                                         run the agent in the foreground (containers, debugging)
    rltrack sync RUN_DIR [--to BACKEND ...] [--config F] [--timeout S]  deliver to trackers afterwards
    rltrack import neptune PATH [--root DIR]              Neptune offline folders -> run directories
    rltrack plot --metric KEY RUN_PATTERN... -o out.png   a metric across runs, mean and 95% band per group
    rltrack report RUN -o report.html                     one run as a self-contained HTML page

This module only parses arguments; the work is done in `rltrack.sync` and
`rltrack.importers`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rltrack.backends.tables import format_table
from rltrack.config import ConfigError
from rltrack.events import NUMERIC_KINDS
from rltrack.journal import read_journal
from rltrack.report import Report
from rltrack.sync import DEFAULT_TIMEOUT, SyncError
from rltrack.sync import sync as sync_run
from rltrack.version import __version__


def show(run_dir: Path) -> int:
    """Status from meta.json, then the last value of every scalar in the journal."""
    meta_path = run_dir / "meta.json"
    if not meta_path.is_file():
        print(f"rltrack: {run_dir} is not a run directory (no meta.json)", file=sys.stderr)
        return 2
    meta = json.loads(meta_path.read_text())
    print(f"{meta['name']}: {meta['status']}, started {meta['start_time']} on {meta['host']} (pid {meta['pid']})")
    last: dict[str, object] = {}
    events = 0
    for event in read_journal(run_dir):
        events += 1
        if event.kind in NUMERIC_KINDS:
            last.update({event.tag(k): v for k, v in event.data.items()})
    print(f"{events} events in the journal")
    if last:
        print(format_table("last values", last))
    summary = Report.load(run_dir / "report.json").summary()
    print(f"report.json:\n{summary}" if summary else "report.json: nothing renamed, converted or dropped")
    return 0


def status(as_json: bool) -> int:
    """The agent of this environment: pid, uptime, and per run it serves, each tracker's backlog and last error."""
    from rltrack.agent_files import STATUS, agent_dir, agent_running, read_json

    directory = agent_dir()
    running = agent_running(directory)
    saved = read_json(directory / STATUS) or {}
    agent = read_json(directory / "agent.json") or {}
    runs = saved.get("runs", []) if running else []
    if as_json:
        print(json.dumps({"running": running, "directory": str(directory), "pid": agent.get("pid") if running else None,
                          "uptime": time.time() - agent["started"] if running and "started" in agent else None, "runs": runs}, indent=2))
        return 0
    if not running:
        print(f"no agent runs for {directory} (the first logger that needs one starts it)")
        return 0
    print(f"agent pid {agent.get('pid')}, up {time.time() - agent.get('started', time.time()):.0f} s, serving {len(runs)} writer(s) ({directory})")
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


def import_neptune(path: Path, root: Path) -> int:
    try:
        from rltrack.importers.neptune import import_folder
    except ImportError as exc:
        print(f"rltrack import neptune: not available in this installation ({exc})", file=sys.stderr)
        return 2
    try:
        run_dirs = import_folder(path, root)
    except (OSError, ValueError) as exc:
        print(f"rltrack import neptune: {exc}", file=sys.stderr)
        return 2
    for run_dir in run_dirs:
        print(run_dir)
    if run_dirs:
        print("deliver with: rltrack sync <run dir> --to mlflow (or wandb)", file=sys.stderr)
    return 0


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
    plot_cmd.add_argument("patterns", nargs="+", metavar="RUN_PATTERN", help="a run directory, or a regex searched in the run ids under --root")
    plot_cmd.add_argument("--metric", required=True, help="the metric's key, e.g. collector/reward_mean (canonical names work across frameworks)")
    plot_cmd.add_argument("--x", metavar="AXIS", help="x axis: a step axis such as env_steps or train_iter, or 'time' (default: each run's primary step)")
    plot_cmd.add_argument("--group-by", metavar="KEYS", help="comma-separated hyperparameters (or source, task, host) defining groups "
                          "(default: the hyperparameters that differ between the runs, seeds excepted)")
    plot_cmd.add_argument("--smooth", type=int, default=1, metavar="N", help="trailing moving average over N points of each run first (default 1: none)")
    plot_cmd.add_argument("--size", default="960x600", metavar="WxH", help="image size in pixels (default 960x600)")
    plot_cmd.add_argument("-o", "--output", type=Path, required=True, help="the PNG file to write")
    plot_cmd.add_argument("--root", type=Path, default=Path("runs"), help="the runs root holding the index (default: runs)")
    plot_cmd.set_defaults(handler=figure_command("rltrack.runs.plot_command", "plot_command"))
    report_cmd = commands.add_parser(
        "report", help="one run as a self-contained HTML page: config, summary, plots per metric group, timings, checkpoints"
    )
    report_cmd.add_argument("run", help="a run directory or run id (or its unique beginning)")
    report_cmd.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    report_cmd.add_argument("--root", type=Path, default=Path("runs"), help="the runs root holding the index (default: runs)")
    report_cmd.set_defaults(handler=figure_command("rltrack.runs.report", "report_command"))


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
    commands.add_parser("agent", help="run the delivery agent in the foreground (it exits after a quiet period)")
    import_cmd = commands.add_parser("import", help="turn another tool's saved runs into rltrack run directories")
    import_cmd.add_argument("format", choices=["neptune"], help="neptune: Neptune 1.x .neptune/offline and .neptune/async folders")
    import_cmd.add_argument("path", type=Path)
    import_cmd.add_argument("--root", type=Path, default=Path("runs"), help="where to create the run directories (default: runs)")
    from rltrack.runs.cli import add_commands as add_runs_commands
    from rltrack.runs.cli import dash_values

    add_runs_commands(commands)  # runs ls/show/rm/archive/index, export: each sets a handler
    add_figure_commands(commands)  # plot, report
    args = parser.parse_args(dash_values(sys.argv[1:] if argv is None else argv))
    if hasattr(args, "handler"):
        return int(args.handler(args))
    if args.command == "sync":
        return sync(args.run_dir, args.to, args.config, args.force, args.timeout)
    if args.command == "import":
        return import_neptune(args.path, args.root)
    if args.command == "status":
        return status(args.json)
    if args.command == "agent":
        from rltrack.agent import main as run_agent

        return run_agent(foreground=True)
    return show(args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
