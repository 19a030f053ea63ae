"""The agent's directory: how training processes and the agent talk.

One agent (rltrack.agent.process) serves every run of one user and Python environment
on a machine. Its directory, `<base>/<key>`, is private to the user (0700,
files 0600). The base is `RLTRACK_AGENT_DIR`, else `~/.cache/rltrack/agent`;
the key hashes the Python environment (`sys.prefix`) and the environment
variables the trackers' clients read (`MLFLOW_*`, `WANDB_*`, `NEPTUNE_*`,
credentials of artifact stores, ...): the agent's clients run with the
environment of the process that started it, so processes that differ there
get agents of their own. It holds:

    agent.lock             held (flock) by the live agent; free means none runs
    death.json             the last death of an agent with work left (rltrack.agent.keeper), until a logger tells it
    death.told.json        ... and once told
    spawn.lock             held by a process starting an agent, until it runs
    agent.json             the live agent's pid and start time
    agent.log              what agents printed (errors, warnings of tracker clients)
    status.json            what the agent serves now (`rltrack status`)
    runs/<key>.json        a registration: one writer of one run, written by its logger
    runs/<key>.state.json  how far the agent has got with it, written by the agent

Registrations and states are files rather than messages on a socket: a
registration outlives a killed agent, so the next agent continues every run
from its cursors, and nothing waits on a connection. The logger's side is
`register`, `ensure_running`, `read_state`; the agent's side is in
rltrack.agent.process.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rltrack.core import posix
from rltrack.core.atomic_file import write_atomic
from rltrack.core.locks import hold
from rltrack.core.posix import fcntl

AGENT_DIR_ENV = "RLTRACK_AGENT_DIR"
#: One id per `rltrack run` (set by the launcher for every process below it): a registration
#: records it, so that the launcher waits for its writers' delivery (rltrack.cli.run_wait).
LAUNCH_ENV = "RLTRACK_RUN_LAUNCH"
#: Set while the launcher waits for its writers' delivery: a logger's `close` that ends before the
#: trackers have everything leaves saying so to the launcher.
LAUNCHER_WAITS_ENV = "RLTRACK_RUN_WAITS"
RUNS = "runs"
LOCK = "agent.lock"
SPAWN_LOCK = "spawn.lock"
#: Seconds a process starting the agent waits for it to take its lock (and
#: others starting it meanwhile wait for that one).
SPAWN_WAIT = 15.0
LOG = "agent.log"
STATUS = "status.json"
DEATH, DEATH_TOLD = "death.json", "death.told.json"


#: Prefixes of the environment variables tracker clients (and the stores they
#: write artifacts to) read, and the node name that names the embedded MLflow
#: store (rltrack.trackers.mlflow.store): part of an agent's identity.
TRACKER_ENVIRONMENT = ("MLFLOW_", "WANDB_", "NEPTUNE_", "TRACKIO_", "HF_", "AWS_", "GOOGLE_", "AZURE_", "RLTRACK_NODE")


class ForeignAgentDir(PermissionError):
    """The agent directory belongs to another user."""


def agent_dir() -> Path:
    """This process's agent directory (created, 0700): see the module docstring.
    One that another user owns is refused (`ForeignAgentDir`): its owner could
    read the trackers' settings in the registrations, and plant registrations
    whose backends (`module:Class`, with their `sys.path`) this user's agent would run."""
    base = Path(os.environ.get(AGENT_DIR_ENV) or Path.home() / ".cache" / "rltrack" / "agent").expanduser()
    tracker_environment = sorted((k, v) for k, v in os.environ.items() if k.startswith(TRACKER_ENVIRONMENT))
    identity = json.dumps([os.path.realpath(sys.prefix), tracker_environment])
    directory = base / hashlib.sha1(identity.encode()).hexdigest()[:12]
    for path in (base, directory, directory / RUNS):
        _refuse_foreign(path)
    (directory / RUNS).mkdir(parents=True, exist_ok=True, mode=0o700)
    for path in (base, directory, directory / RUNS):
        _refuse_foreign(path)  # made meanwhile by another user
        os.chmod(path, 0o700)
    return directory


def _refuse_foreign(path: Path) -> None:
    try:
        owner = path.stat().st_uid
    except FileNotFoundError:
        return
    if owner != os.getuid():
        raise ForeignAgentDir(
            f"rltrack: the agent directory {path} belongs to {_user(owner)}, not to you ({_user(os.getuid())}); an agent directory "
            f"holds the trackers' settings and says what the agent runs, so it is never shared between users: set {AGENT_DIR_ENV} "
            f"to a directory of your own (default ~/.cache/rltrack/agent)"
        )


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def registration_key(run_dir: Path, writer: str | None) -> str:
    """One key per logger: a run resumed later, or written by several processes, gets one per session."""
    text = f"{run_dir.resolve()}\0{writer or ''}\0{os.getpid()}\0{time.time()}"
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def launch_registrations(directory: Path, launch: str) -> dict[str, dict[str, Any]]:
    """The registrations (by key) of the writers one `rltrack run` started (`LAUNCH_ENV`) that the agent still serves."""
    found = {}
    for key, path in registrations(directory).items():
        registration = read_json(path)
        if registration is not None and registration.get("launch") == launch:
            found[key] = registration
    return found


def registration_path(directory: Path, key: str) -> Path:
    return directory / RUNS / f"{key}.json"


def registrations(directory: Path, under: Path | None = None) -> dict[str, Path]:
    """The registration files of `directory`, by key; with `under`, only
    those of runs whose directory is inside it (one sweep's, one script's)."""
    found = {path.name[: -len(".json")]: path for path in (directory / RUNS).glob("*.json") if not path.name.endswith(".state.json")}
    if under is None:
        return found
    root = Path(under).resolve()
    inside = {}
    for key, path in found.items():
        registration = read_json(path)
        if registration is not None and Path(registration["run_dir"]).is_relative_to(root):
            inside[key] = path
    return inside


def state_path(directory: Path, key: str) -> Path:
    return directory / RUNS / f"{key}.state.json"


def write_private(path: Path, data: Any) -> None:
    """JSON, atomically, readable by the user alone (a registration holds the trackers' settings)."""
    write_atomic(path, json.dumps(data), mode=0o600)


def read_json(path: Path) -> dict[str, Any] | None:
    """A registration, state or status; None if missing (or being replaced)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_state(directory: Path, key: str) -> dict[str, Any] | None:
    return read_json(state_path(directory, key))


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (Linux), so
    that a pid reused by another process is not taken for the run's; None
    without /proc (macOS), where a live pid is taken for the run's."""
    try:
        with open(posix.PROC / str(pid) / "stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return start is None or process_start(pid) in (None, start)


def agent_running(directory: Path) -> bool:
    """True while an agent holds the directory's lock."""
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing the descriptor releases a lock taken through it
    return False


def ensure_running(directory: Path) -> bool:
    """Starts an agent for `directory` unless one runs; True if this call started one.
    Processes starting one at the same instant take turns (`spawn.lock`): the
    first starts it and waits until it holds the agent lock, the others then
    find it running."""
    if agent_running(directory):
        return False
    fd = hold(directory / SPAWN_LOCK, SPAWN_WAIT)
    if fd is None:
        return False
    try:
        if agent_running(directory):
            return False
        source_root = str(Path(__file__).resolve().parents[1])  # the agent imports this rltrack, installed or not
        python_path = [os.path.abspath(entry) for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([source_root, *python_path])}
        with open(directory / LOG, "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "rltrack.agent.keeper", str(directory)], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                process_group=0, close_fds=True, cwd="/",  # leaves the starter's process tree, not its session: see rltrack.agent.keeper
            )  # fmt: skip
        try:
            child.wait(SPAWN_WAIT + 5)  # it returns once the agent holds its lock
        except subprocess.TimeoutExpired:
            pass
        return True
    finally:
        os.close(fd)


def death_untold(directory: Path) -> dict[str, Any] | None:
    """The last death of the agent (see rltrack.agent.keeper) if no logger has
    told it yet; this call claims it (one process among many gets it)."""
    try:
        os.rename(directory / DEATH, directory / DEATH_TOLD)
    except OSError:
        return None
    return read_json(directory / DEATH_TOLD)


def last_death(directory: Path) -> dict[str, Any] | None:
    """The last death of the agent, told or not, for `rltrack status`."""
    deaths = [death for death in (read_json(directory / name) for name in (DEATH, DEATH_TOLD)) if death]
    return max(deaths, key=lambda death: death.get("at", 0), default=None)


def describe_death(death: dict[str, Any]) -> str:
    """One line: when and how the agent died, what it said, and what followed."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(death.get("at", 0)))
    said = f" ({death['error']})" if death.get("error") else ""
    then = (f"another was started {death['restart_in']:.0f} s later" if death.get("restart_in") is not None
            else "none was started again until a logger needed one")  # fmt: skip
    return f"the delivery agent {death.get('pid')} died at {when}, {death.get('how')}{said}, with {death.get('registrations')} run writer(s) to serve; {then}"
