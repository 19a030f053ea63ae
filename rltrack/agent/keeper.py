"""The agent's keeper: the process a logger starts, which leaves the logger's
process tree and keeps an agent running while registrations have work.

Why it exists: the process that makes a logger is often not long-lived. A
Ray worker kills its children when it exits (Ray 2.60's default,
`RAY_kill_child_processes_on_worker_exit`), a notebook kernel's restart or a
job step's end takes its process group, and an agent that dies there leaves
every run it served undelivered until some other logger opens. So:

* The logger starts `python -m rltrack.agent.keeper DIR` in a process group
  of its own, in `/` (rltrack.agent.files.ensure_running). That process forks
  (the keeper) and exits as soon as an agent holds the directory's lock: the
  keeper, orphaned, is nobody's child but init's (or a subreaper's), so a
  reaper that kills a process's children or its process group misses it.
* It stays in the starter's session: where the kernel shares the CPU between
  sessions first (autogroups), a session of its own took an equal share of
  the CPU against the whole of training however niced (see
  rltrack.agent.resources.lower_priority); in the starter's session the agent
  takes a share beside training's processes as its niceness (`NICENESS`) says.
* It runs the agent (`python -m rltrack.agent.process DIR`) as its child and waits.
  An agent that dies (killed, or an exception) while registrations are left
  is started again after a pause that doubles with each quick death
  (`MAX_QUICK_DEATHS` in a row, each within `QUICK` seconds of its start,
  stop it); each death is written to `death.json` for `rltrack status` and the
  next logger's stderr. An agent that exits by itself (idle) or is stopped on
  purpose (SIGTERM, SIGINT, SIGHUP) ends the keeper too; the keeper hands
  those signals to the agent, which stores what it holds and ends, so either
  process of the pair stops both (`rltrack agent stop` signals the agent).

Not escaped: a cgroup-wide kill (systemd, Slurm) and Ray's optional
`RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper`, under which
Ray's processes adopt orphans and kill them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rltrack.agent.files import DEATH, LOG, SPAWN_WAIT, agent_running, read_json, registrations, write_private

#: An agent that dies within this many seconds of its start died quickly.
QUICK = 60.0
#: Quick deaths in a row after which the keeper stops starting agents (the next logger starts one again).
MAX_QUICK_DEATHS = 5
#: Ways to end a process on purpose: the keeper does not start another agent after them.
STOPPED = {-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP}


def main(directory: Path) -> int:
    """The starter's child: forks the keeper, then returns once an agent runs
    (or the keeper ended, or `SPAWN_WAIT` passed) so that the starter reaps it."""
    keeper = os.fork()
    if keeper == 0:
        os._exit(keep(directory))
    deadline = time.monotonic() + SPAWN_WAIT
    while not agent_running(directory) and os.waitpid(keeper, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    return 0


def keep(directory: Path) -> int:
    """Runs agents for `directory` until one exits by itself or is stopped on
    purpose (a stop signal to the keeper is handed to its agent)."""
    quick_deaths = 0
    stopped: list[int] = []
    agent: subprocess.Popen[bytes] | None = None

    def hand_over(signum: int, frame: Any) -> None:
        stopped.append(signum)
        if agent is not None:
            with contextlib.suppress(ProcessLookupError):
                agent.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, hand_over)
    while not stopped:
        started = time.monotonic()
        agent = subprocess.Popen([sys.executable, "-m", "rltrack.agent.process", str(directory)], stdin=subprocess.DEVNULL, close_fds=True)
        if stopped:  # a signal that came before the agent had a pid
            agent.send_signal(stopped[0])
        code = agent.wait()
        if code == 0 or code in STOPPED or stopped:
            return 0
        quick_deaths = quick_deaths + 1 if time.monotonic() - started < QUICK else 1
        served = (read_json(directory / "agent.json") or {}).get("pid") == agent.pid  # it started serving
        left = len(registrations(directory))
        again = bool(left) and served and quick_deaths < MAX_QUICK_DEATHS
        pause = 2.0 ** (quick_deaths - 1)
        record_death(directory, agent.pid, code, left, pause if again else None)
        if not again:
            return 1
        time.sleep(pause)
    return 0


def record_death(directory: Path, pid: int, code: int, left: int, restart_in: float | None) -> None:
    """Writes `death.json` (read by `rltrack status` and told by the next logger) and a line in agent.log."""
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    death = {"pid": pid, "at": time.time(), "how": how, "error": _last_error(directory / LOG, pid), "registrations": left, "restart_in": restart_in}
    write_private(directory / DEATH, death)
    then = f"another starts in {restart_in:.0f} s" if restart_in is not None else "no other is started until a logger needs one"
    print(f"rltrack agent keeper: agent {pid} {how} with {left} registration(s) left; {then}", file=sys.stderr, flush=True)


def _last_error(log: Path, pid: int) -> str | None:
    """What agent `pid` said last in agent.log before it died of an exception (rltrack.agent.process.main), if it did."""
    said = f"rltrack agent {pid}: died: "
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    return next((line[len(said):] for line in reversed(lines) if line.startswith(said)), None)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
