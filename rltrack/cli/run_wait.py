"""`rltrack run` returns when the trackers have the run: the wait after the command ends.

Why: a logger's `close()` waits `run.close_timeout` (5 s by default) and the
command ends; the agent goes on delivering. A user who opens MLflow the
moment the launcher returns saw a run not yet there. So the launcher waits,
bounded (`--wait`, `DEFAULT_WAIT` s; `--no-wait` skips it), until the agent
has finished every writer of the launch: each registration records the
launch's id (rltrack.agent.files.LAUNCH_ENV), and the agent removes a
registration once it has delivered everything (or given up, saying what is
pending in the writer's state). While it waits it says on stderr what is
pending (again every `TELL_EVERY` s while that changes); at the bound, per
run, the one `rltrack sync` line that finishes it. A logger whose `close()`
ended before the trackers had everything leaves saying so to the launcher
(`LAUNCHER_WAITS_ENV`). Only writers of this Python environment's agent are
waited for (a command that runs another interpreter has an agent of its own).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, TextIO

from rltrack.agent.files import agent_dir, ensure_running, launch_registrations, read_state, state_path

#: Seconds `rltrack run` waits for the trackers after the command ends, unless `--wait` says otherwise.
DEFAULT_WAIT = 120.0
#: Seconds between the lines saying what is still pending.
TELL_EVERY = 15.0
#: Seconds between looks at the launch's registrations (each a small file read: a sweep's launch has many).
POLL = 0.1
#: Seconds between the checks that an agent runs while waiting (one that died is started again).
CHECK_EVERY = 1.0


def wait_for_trackers(launch: str, wait: float, out: TextIO = sys.stderr) -> bool:
    """Waits up to `wait` seconds until the agent has finished every writer
    of `launch`; says what is pending and, at the bound or for a writer the
    agent gave up, how to finish it. True when everything was delivered."""
    try:
        directory = agent_dir()
    except OSError:
        return True  # the command's own logger said what is wrong with the agent directory
    deadline = time.monotonic() + wait
    seen: dict[str, dict[str, Any]] = {}
    told, told_at, checked_at, complete = "", 0.0, 0.0, True
    while True:
        serving = launch_registrations(directory, launch)
        for key in [key for key in seen if key not in serving]:  # finished by the agent meanwhile
            complete &= _finished(directory, key, seen.pop(key), out)
        seen.update(serving)
        if not serving:
            return complete
        now = time.monotonic()
        if now >= deadline:
            for run_dir, trackers in _pending(directory, serving).items():
                names = [name for name in trackers if name != "files"]
                print(f"rltrack run: {run_dir}: {', '.join(trackers) or 'the end of the run'} not delivered after {wait:.0f} s; "
                      "the agent goes on delivering (`rltrack status`)" + (f"; to finish now: rltrack sync {run_dir} --to {' --to '.join(names)}" if names else ""),
                      file=out)  # fmt: skip
            return False
        line = "; ".join(f"{run_dir}: {', '.join(f'{name} ({what})' for name, what in trackers.items()) or 'its end'}" for run_dir, trackers in _pending(directory, serving).items())
        if line != told and now - told_at >= TELL_EVERY:
            print(f"rltrack run: waiting up to {deadline - now:.0f} s for the trackers (--no-wait skips this): {line}", file=out)
            told, told_at = line, now
        if now - checked_at >= CHECK_EVERY:
            checked_at = now
            ensure_running(directory)
        time.sleep(POLL)


def _pending(directory: Any, serving: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Per run directory, what the agent has not yet delivered of its writers: {tracker or "files": how much}."""
    pending: dict[str, dict[str, str]] = {}
    for key, registration in serving.items():
        state = read_state(directory, key) or {}
        behind = pending.setdefault(registration["run_dir"], {})
        if registration.get("files") and not state:
            behind["files"] = "not yet picked up"
        for name in registration.get("trackers") or {}:
            info = (state.get("trackers") or {}).get(name) or {}
            if not info.get("done"):
                size = info.get("pending_bytes")
                behind[name] = (f"{size:,} bytes" if size else "its end") + (f", last error: {info['last_error']}" if info.get("last_error") else "")
    return pending


def _finished(directory: Any, key: str, registration: dict[str, Any], out: TextIO) -> bool:
    """A writer the agent finished: says what it left undelivered (given up),
    unless the writer's own logger saw the end and said it (it removed the state)."""
    state = read_state(directory, key)
    if state is None or not state.get("done"):
        return True
    with contextlib.suppress(FileNotFoundError):
        os.unlink(state_path(directory, key))
    pending = state.get("pending") or {}
    if not pending:
        return True
    run_dir = registration["run_dir"]
    names = [name for name in pending if name != "files"]
    errors = "; ".join(f"{name}: {error}" for name, error in pending.items() if error)
    print(f"rltrack run: {run_dir}: {', '.join(pending)} not delivered" + (f" ({errors})" if errors else "")
          + (f"; fix what the error says, then: rltrack sync {run_dir} --to {' --to '.join(names)}" if names else ""), file=out)  # fmt: skip
    return False
