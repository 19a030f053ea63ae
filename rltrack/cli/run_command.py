"""`rltrack run [--config FILE] [--name NAME] -- python script.py ARGS`: a script's
TensorBoard writers into every tracker, with no change to its code.

The launcher starts the command with `rltrack/cli/launch_site` first on
`PYTHONPATH` (after it, whatever `PYTHONPATH` held), so that every Python
process below it attaches rltrack to its TensorBoard writers at start-up
(rltrack.cli.run_child says how the runs of a launch relate), with
`RLTRACK_CONFIG` set to `--config`. With `run.launch_runs = "one"` it names
the launch's one run before starting the command (`--name`, else `run.name`,
else the script's name) and reserves its directory, which it removes again
if nothing wrote it. It forwards SIGTERM and SIGHUP to the
command, and SIGINT too unless the terminal sent it to both already (the
launcher is in the terminal's foreground process group), waits for it,
and exits with its exit code (128 + N when signal N ended it, as shells say),
once the trackers have the command's runs (bounded: rltrack.cli.run_wait).

While the command's Python starts (imports, often seconds of them), the
launcher starts the agent the command's runs will need, when the command
runs this interpreter (so the same agent directory): the command's first
writer then finds it running instead of waiting for it to start (about
0.2 s of the command's wall time on a quiet machine, bench/RESULTS.md,
"CleanRL under rltrack run").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rltrack.agent.files import LAUNCHER_WAITS_ENV, agent_dir, ensure_running
from rltrack.cli.run_child import ENV_COMMAND, ENV_FIRST, ENV_LAUNCH, ENV_NAME, ENV_RUN_DIR
from rltrack.cli.run_wait import DEFAULT_WAIT, wait_for_trackers
from rltrack.sinks.rundir import create_run_dir
from rltrack.trackers.remote import StoreNotReady
from rltrack.training.config import ConfigError, launch_stores, load_config

#: The directory whose `sitecustomize` attaches rltrack in every Python process of the command.
SITE_DIR = Path(__file__).resolve().parent / "launch_site"
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def add_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser(
        "run",
        help="run a command with rltrack attached to every TensorBoard writer of its Python processes",
        description="rltrack run [--config FILE] [--name NAME] -- python script.py ARGS",
    )
    run.add_argument("--config", type=Path, metavar="FILE", help="rltrack config (TOML/YAML): trackers, filters, run root (default: RLTRACK_CONFIG, else local files under ./runs)")
    run.add_argument("--name", help="the run's name (default: the config's run.name, else the first writer's log directory)")
    run.add_argument("--wait", type=_seconds, default=DEFAULT_WAIT, metavar="SECONDS",
                     help=f"after the command, wait up to SECONDS until the trackers have its runs (default {DEFAULT_WAIT:.0f})")
    run.add_argument("--no-wait", dest="wait", action="store_const", const=0.0, help="return as soon as the command ends; the agent delivers in the background")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    run.set_defaults(handler=lambda args: launch(args.command, args.config, args.name, args.wait))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0, e.g. --wait 300 (or --no-wait)")
    return value


def launch(command: list[str], config: Path | None, name: str | None, wait: float = DEFAULT_WAIT) -> int:
    """Runs `command` attached, then waits up to `wait` seconds for the
    trackers to have its runs (rltrack.cli.run_wait); returns its exit code."""
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("rltrack run: no command given; e.g. rltrack run --config rltrack.toml -- python train.py --seed 1", file=sys.stderr)
        return 2
    if config is not None and not config.is_file():
        print(f"rltrack run: --config {str(config)!r} is no file; give the path of a .toml/.yaml config", file=sys.stderr)
        return 2
    env = child_environment(command, config, name)
    if wait > 0:
        env[LAUNCHER_WAITS_ENV] = "1"
    try:
        cfg = load_config(env.get("RLTRACK_CONFIG") or None)  # a mistake in the config shows now, not in the script
        launch_stores(cfg)  # the trackers' stores whole before the command writes (rltrack.trackers.mlflow.whole)
    except (ConfigError, StoreNotReady) as exc:
        print(f"rltrack run: {exc}", file=sys.stderr)
        return 2
    settings = cfg["run"]
    one_run = None
    if settings["launch_runs"] == "one":  # named now: every process of the launch writes this directory
        one_run = create_run_dir(Path(settings["root"]).expanduser().resolve(), name or settings["name"] or command_name(command))
        env[ENV_RUN_DIR] = str(one_run)
    try:
        code = _run(command, env)
    finally:
        if one_run is not None:
            _remove_if_empty(one_run)
    if wait > 0:
        try:
            wait_for_trackers(env[ENV_LAUNCH], wait)
        except KeyboardInterrupt:
            print("\nrltrack run: stopped waiting for the trackers; the agent goes on delivering (`rltrack status`)", file=sys.stderr)
    return code


def _run(command: list[str], env: dict[str, str]) -> int:
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        print(f"rltrack run: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    previous = {sig: signal.signal(sig, _forwarder(child)) for sig in FORWARDED}
    try:
        if runs_this_python(command, env):  # on a thread: a command done first is not held up by the agent's start
            threading.Thread(target=_start_agent, name="rltrack-start-agent", daemon=True).start()
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def runs_this_python(command: list[str], env: dict[str, str]) -> bool:
    """Whether the command's program is this interpreter of this environment
    (found the way the command is: through the child's PATH)."""
    program = shutil.which(command[0], path=env.get("PATH"))
    if program is None:
        return False
    here = Path(sys.executable).absolute()
    return Path(program).absolute().parent == here.parent and os.path.realpath(program) == os.path.realpath(here)


def _start_agent() -> None:
    """Starts the agent of this environment unless one runs; a failure is
    left for the command's first writer, which says it where the user looks."""
    try:
        ensure_running(agent_dir())
    except Exception:  # noqa: BLE001 - the command's own logger reports what is wrong with the agent directory
        pass


def command_name(command: list[str]) -> str:
    """The run's name from the command line: the script's (`python ppo.py` -> ppo,
    `python -m pkg.train` -> train), else the program's."""
    for index, arg in enumerate(command):
        if arg.endswith(".py"):
            return Path(arg).stem
        if arg == "-m" and index + 1 < len(command):
            return command[index + 1].rpartition(".")[2]
    return Path(command[0]).name


def _remove_if_empty(run_dir: Path) -> None:
    """The directory reserved for the one run, if no process wrote it."""
    try:
        run_dir.rmdir()
    except OSError:
        pass


def child_environment(command: list[str], config: Path | None, name: str | None) -> dict[str, str]:
    """The command's environment: the site directory first on PYTHONPATH, what
    the processes below need to open their runs."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *paths])
    env[ENV_COMMAND] = json.dumps(command)
    env[ENV_NAME] = name or ""
    env[ENV_LAUNCH] = f"{socket.gethostname()}-{os.getpid()}-{time.time():.0f}"
    env[ENV_FIRST] = "1"
    if config is not None:
        env["RLTRACK_CONFIG"] = str(config.resolve())
    return env


def _forwarder(child: subprocess.Popen[Any]) -> Any:
    def forward(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and _terminal_sent_it():
            return  # the terminal's Ctrl-C reached the command too: once is enough
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    return forward


def _terminal_sent_it() -> bool:
    """Whether this process is in its terminal's foreground process group, which
    Ctrl-C signals as a whole (the command included)."""
    try:
        with open("/dev/tty") as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:
        return False
