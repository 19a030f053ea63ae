"""`rltrack agent` (the delivery agent in the foreground) and `rltrack agent stop`.

Why: one agent per machine (user, Python environment) delivers every run in
the background and exits after `RLTRACK_AGENT_IDLE` (30) quiet seconds; a
user who wants it gone sooner (before changing the trackers' credentials,
to free the machine) stops it here. `stop` sends SIGTERM to the agent,
which stores what it holds (the local files flushed, each tracker's staged
rows stored, cursors moved: rltrack.agent.process.Agent.stop) and ends with
its keeper; `--now` ends both at once (SIGKILL, the keeper first so that it
starts no other). Either way what is left of each run waits in its journal
for the next agent, which the next logger starts, or `rltrack sync`. A
SIGTERM to either process of the pair (keeper, agent) does what `stop` does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from rltrack.agent.files import agent_dir, agent_running, read_json, registrations

#: Seconds `stop` waits for the agent to end, beyond the agent's own `STOP_WAIT`.
MARGIN = 30.0
#: How `rltrack status` and the docs say it.
HOW_TO_STOP = "rltrack agent stop (stores what it holds, then ends), rltrack agent stop --now (at once)"


def add_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    agent = commands.add_parser("agent", help="run the delivery agent in the foreground (it exits after a quiet period), or stop the running one")
    agent.add_argument("action", nargs="?", choices=["stop"], help="stop: end this environment's agent after it stored what it holds")
    agent.add_argument("--now", action="store_true", help="with stop: end it at once (what it had not stored is delivered again from the journals)")
    agent.set_defaults(handler=lambda args: stop(args.now) if args.action == "stop" else _foreground())


def _foreground() -> int:
    from rltrack.agent.process import main

    return main(foreground=True)


def stop(now: bool) -> int:
    """Ends this environment's agent (and its keeper); 0 once it has ended, 1 if it had not within the wait."""
    from rltrack.agent.process import STOP_WAIT  # the agent's modules only for this command

    directory = agent_dir()
    info = read_json(directory / "agent.json") or {}
    pid, keeper = info.get("pid"), info.get("keeper")
    if not agent_running(directory) or not isinstance(pid, int):
        print(f"rltrack agent: no agent runs for {directory}")
        return 0
    wait = 10.0 if now else STOP_WAIT + MARGIN
    targets = [keeper, pid] if now else [pid]  # the keeper first: it would start another agent after a SIGKILL
    for target in targets:
        if isinstance(target, int) and target > 1:
            try:
                os.kill(target, signal.SIGKILL if now else signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait
    while agent_running(directory) and time.monotonic() < deadline:
        time.sleep(0.05)
    if agent_running(directory):
        print(f"rltrack agent: agent {pid} still runs after {wait:.0f} s; rltrack agent stop --now ends it at once", file=sys.stderr)
        return 1
    left = len(registrations(directory))
    how = "at once" if now else "after storing what it held"
    then = (f"; {left} run writer(s) wait in their journals: the next logger starts an agent for them (a training still running "
            "starts one within a second), or deliver them now with rltrack sync RUN_DIR") if left else ""  # fmt: skip
    print(f"rltrack agent: agent {pid} stopped {how}{then}")
    return 0
