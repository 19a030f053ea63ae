"""The side of `rltrack run` inside each Python process it starts.

The launcher (rltrack.cli.run_command) puts `rltrack/cli/launch_site` first on
`PYTHONPATH`; its `sitecustomize` calls `attach_from_environment` at every
Python start below the launcher (the script, its `subprocess` children,
`multiprocessing` spawn workers), which attaches rltrack to every TensorBoard
writer of that process (rltrack.adapters.tensorboard) and opens nothing yet.

How a child process's run relates to the parent's: **one run per process
that writes.** A process opens its run when its first writer writes a
value, named `--name`, else the config's `run.name`, else after that
writer's log directory (CleanRL's `runs/<run_name>`, DI-engine's
`<exp_name>`); the other writers of that process join the same run (another
log directory becomes a namespace). A child process that writes (a
`multiprocessing` worker with a writer of its own) has a run of its own
beside its parent's, with the same config; a child that writes nothing has
none. Every such run's meta.json `info` holds `command` (the command line
given to `rltrack run`), `argv` (the process's own), `pid`, `parent_pid` and
`launch` (one id per `rltrack run`, shared by all its processes): that is
what ties the runs of one launch together. A process forked from a writing
one opens its own run as well.

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
#: One id per launch, shared by every run it makes.
ENV_LAUNCH = "RLTRACK_RUN_LAUNCH"


def attach_from_environment() -> None:
    """Attaches to every TensorBoard writer of this process if `rltrack run` started it."""
    command = os.environ.get(ENV_COMMAND)
    if command is None:
        return
    from rltrack.adapters import tensorboard

    _note_exit_codes()
    tensorboard.attach(partial(open_run, json.loads(command), os.environ.get(ENV_NAME) or None, os.environ.get(ENV_LAUNCH, "")))


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


def open_run(command: list[str], name: str | None, launch: str, logdir: str) -> Logger:
    """This process's run, opened when its first writer (in `logdir`) writes."""
    from rltrack.frameworks.tensorboard import run_name
    from rltrack.training.config import load_config, make_logger

    configured = load_config()["run"]["name"]  # RLTRACK_CONFIG, set by the launcher from --config
    logger = make_logger(run={"name": name or configured or run_name(logdir)})
    info: dict[str, Any] = {"command": command, "argv": list(sys.argv), "pid": os.getpid(), "parent_pid": os.getppid(), "launch": launch, "logdir": logdir}
    logger.set_run_info(info)
    return logger
