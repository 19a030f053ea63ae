"""The side of `rltrack run` inside each Python process it starts.

The launcher (rltrack.cli.run_command) puts `rltrack/cli/launch_site` first on
`PYTHONPATH`; its `sitecustomize` calls `attach_from_environment` at every
Python start below the launcher (the script, its `subprocess` children,
`multiprocessing` spawn workers), which attaches rltrack to every TensorBoard
writer of that process (rltrack.adapters.tensorboard) and opens nothing yet.

How a child process's run relates to the parent's: **one run per process
that writes** (`run.launch_runs = "per-process"`, the default). A process
opens its run when its first writer writes a value, named `--name`, else the
config's `run.name`, else as the writer's library names it
(rltrack.frameworks.tensorboard_runs.run_name: CleanRL's `runs/<run_name>`,
DI-engine's `<exp_name>`, rl_games' experiment above its `summaries`, HF's
`run_name` or `output_dir`); the other writers of that
process join the same run (another log directory becomes a namespace). A
child process that writes (a `multiprocessing` worker with a writer of its
own, spawned or forked, a `subprocess`) has a run of its own beside its
parent's, with the same config; a child that writes nothing has none. Every
such run's meta.json `info` holds `command` (the command line given to
`rltrack run`), `argv` (the process's own), `pid`, `parent_pid` and `launch`
(one id per `rltrack run`, shared by all its processes): that is what ties
the runs of one launch together.

`run.launch_runs = "one"`: every process of the launch writes the one run
the launcher named before starting the command (`--name`, else `run.name`,
else the script's name; `ENV_RUN_DIR`), each as a writer of it (`run.worker`:
`main` for the first Python process of the launch, `pid<N>` for the others).
The first process's tags route as in a run of its own; every other process's
values go into namespaces named after their writers' log directories, keys
as tagged, so that the processes' tags (each worker's `charts/SPS`) do not
collide in the trackers.

Each run ends with its own process: a normal exit is `finished`, an
exception or a non-zero `sys.exit` `failed`, SIGTERM or Ctrl-C `killed`
(rltrack.training.exits), a process killed outright (SIGKILL, a crash of the
interpreter) `crashed`, as the agent finds it gone.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from rltrack.training.logger import Logger

#: The command line given to `rltrack run`, as a JSON list: set means "attach in this process".
ENV_COMMAND = "RLTRACK_RUN_COMMAND"
#: `--name`, or empty.
ENV_NAME = "RLTRACK_RUN_NAME"
#: One id per launch, shared by every run it makes; each writer's registration records it
#: (rltrack.agent.files.LAUNCH_ENV, not imported here: this module runs at every Python start).
ENV_LAUNCH = "RLTRACK_RUN_LAUNCH"
#: `run.launch_runs = "one"`: the run directory every process of the launch writes (reserved by the launcher).
ENV_RUN_DIR = "RLTRACK_RUN_DIR"
#: Set by the launcher, removed by the first Python process below it, which thereby is the launch's `main` writer.
ENV_FIRST = "RLTRACK_RUN_FIRST"
#: This process's pid if it is the launch's first Python process.
_MAIN_PID: int | None = None


def attach_from_environment() -> None:
    """Attaches to every TensorBoard writer of this process if `rltrack run` started it."""
    command = os.environ.get(ENV_COMMAND)
    if command is None:
        return
    global _MAIN_PID
    from rltrack.adapters import tensorboard

    if os.environ.pop(ENV_FIRST, None) is not None:  # children started from now on find it gone
        _MAIN_PID = os.getpid()
    _note_exit_codes()
    open_logger = partial(open_run, json.loads(command), os.environ.get(ENV_NAME) or None, os.environ.get(ENV_LAUNCH, ""))
    one_run = ENV_RUN_DIR in os.environ
    tensorboard.attach(open_logger, namespaced=one_run and os.getpid() != _MAIN_PID, namespaced_after_fork=one_run)


def _note_exit_codes() -> None:
    """`sys.exit(n)` (and the `exit`/`quit` builtins) tell rltrack's exit hooks
    the code, so a run ends `failed` on a non-zero one: a `SystemExit` never
    reaches an excepthook. `raise SystemExit(n)` itself is not seen."""
    import builtins

    from rltrack.training.exits import ended_by

    def noting(original: Callable[..., Any]) -> Callable[..., Any]:
        def exit(code: Any = None) -> Any:
            ended_by(SystemExit(code))
            return original(code)

        return exit

    sys.exit = noting(sys.exit)  # type: ignore[assignment]
    for name in ("exit", "quit"):
        if hasattr(builtins, name):
            setattr(builtins, name, noting(getattr(builtins, name)))


def open_run(command: list[str], name: str | None, launch: str, logdir: str, *, run_name: str) -> Logger:
    """This process's run, opened when its first writer (in `logdir`) writes;
    `run_name`: the name the writer's library gives it (used unless `--name`
    or the config names the run)."""
    from rltrack.training.config import load_config, make_logger

    one_run = os.environ.get(ENV_RUN_DIR)
    if one_run:
        worker = "main" if os.getpid() == _MAIN_PID else f"pid{os.getpid()}"
        logger = make_logger(run={"root": os.path.dirname(one_run), "name": os.path.basename(one_run), "worker": worker})
    else:
        configured = load_config()["run"]["name"]  # RLTRACK_CONFIG, set by the launcher from --config
        logger = make_logger(run={"name": name or configured or run_name})
    info: dict[str, Any] = {"command": command, "argv": list(sys.argv), "pid": os.getpid(), "parent_pid": os.getppid(), "launch": launch, "logdir": logdir}
    logger.set_run_info(info)
    return logger
