"""A logger's link to the agent: its run registered, an agent kept running,
and the waits of `flush` and `close` on what the agent has done.

See rltrack.agent_files for the directory both sides share and
rltrack.agent for the agent.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from rltrack.agent_files import (
    agent_dir,
    death_untold,
    describe_death,
    ensure_running,
    process_start,
    read_state,
    registration_key,
    registration_path,
    write_private,
)
from rltrack.backends import backend_class
from rltrack.delivery import merge_into_report_file, time_left

#: The waits on the agent look at the writer's state first after `POLL`
#: seconds, then less and less often, up to every `POLL_MAX`: a Tune driver
#: has a closing logger waiting per trial that ended, on its own process's GIL.
POLL, POLL_MAX = 0.02, 0.2
#: Seconds between the checks that an agent runs (starting one if not), for
#: all the loggers of a process together: a Tune driver holds one per trial,
#: and each check takes a lock file.
CHECK_EVERY = 1.0
_checked_at: dict[Path, float] = {}  # agent directory -> when this process last checked it


class AgentLink:
    """Registers one writer of one run with the agent, and waits on it."""

    def __init__(
        self, run_dir: Path, name: str, writer: str | None, config: Mapping[str, Any],
        files: dict[str, Any], trackers: dict[str, Any],
    ) -> None:  # fmt: skip
        self.dir = agent_dir()
        self.run_dir = run_dir
        self.trackers = list(trackers)
        self.key = registration_key(run_dir, writer)
        self._registration = {
            "run_dir": str(run_dir.resolve()),
            "name": name,
            "writer": writer,
            "pid": os.getpid(),
            "pid_start": process_start(os.getpid()),
            "host": socket.gethostname(),
            "config": dict(config),
            "files": files,
            "trackers": trackers,
            "sys_path": [os.path.abspath(p or ".") for p in sys.path],
            "status": None,
        }
        write_private(registration_path(self.dir, self.key), self._registration)
        self._check()
        death = death_untold(self.dir)
        if death is not None:
            print(f"rltrack: {describe_death(death)} (`rltrack status`, {self.dir / 'agent.log'})", file=sys.stderr)

    def ensure_running(self) -> None:
        """Checks that an agent runs, unless a logger of this process did less than `CHECK_EVERY` ago."""
        if time.monotonic() - _checked_at.get(self.dir, -CHECK_EVERY) >= CHECK_EVERY:
            self._check()

    def _check(self) -> None:
        _checked_at[self.dir] = time.monotonic()
        ensure_running(self.dir)

    def wait_for_files(self, journal: Path, deadline: float) -> bool:
        """Until the agent has written the local files up to the journal's
        current end; False if `deadline` passed first."""
        target = journal.stat().st_size if journal.is_file() else 0
        return self._wait(lambda state: bool(state.get("done") or (state.get("files_offset") or 0) >= target), deadline)[1]

    def finish(self, status: str, deadline: float | None, journal: Path) -> bool:
        """Tells the agent the run ended with `status` (the journal is
        complete) and waits for it to deliver everything until `deadline`
        (None: as long as it takes). If it has not by then, one line on stderr
        says what is behind, and report.json counts it as pending."""
        write_private(registration_path(self.dir, self.key), {**self._registration, "status": status})
        state, done = self._wait(lambda state: bool(state.get("done")), deadline)
        for error in (state or {}).get("errors", []):
            print(f"rltrack: {error} (further errors are counted in {self.run_dir / 'report.json'})", file=sys.stderr)
        behind = state.get("pending", {}) if done and state else self._behind(state, journal)
        if done:
            os.unlink(self.dir / "runs" / f"{self.key}.state.json")
        if behind:
            merge_into_report_file(self.run_dir, {}, [backend_class(name).name for name in behind if name != "files"])
            errors = "; ".join(f"{name}: {error}" for name, error in behind.items() if error)
            trackers = [name for name in behind if name != "files"]
            print(
                f"rltrack: {', '.join(behind)} not done at close{' (' + errors + ')' if errors else ''}; the agent goes on "
                f"delivering (`rltrack status`)" + (f"; to finish now: rltrack sync {self.run_dir} --to {' --to '.join(trackers)}" if trackers else ""),
                file=sys.stderr,
            )
        return done and not behind

    def _wait(self, reached: Callable[[dict[str, Any]], bool], deadline: float | None) -> tuple[dict[str, Any] | None, bool]:
        """Looks at the writer's state (after `POLL` seconds, then less and
        less often) until `reached(state)` or `deadline` (None: no limit),
        keeping an agent running; returns the last state and whether it was reached."""
        pauses = _pauses()
        while True:
            state = read_state(self.dir, self.key)
            if state is not None and reached(state):
                return state, True
            if deadline is not None and time.monotonic() >= deadline:
                return state, False
            self.ensure_running()
            pause = next(pauses)
            time.sleep(pause if deadline is None else min(pause, time_left(deadline) or POLL))

    def _behind(self, state: dict[str, Any] | None, journal: Path) -> dict[str, str | None]:
        """What the agent had not finished when the logger stopped waiting."""
        behind: dict[str, str | None] = {}
        written = (state or {}).get("files_offset") or 0
        if self._registration["files"] and written < (journal.stat().st_size if journal.is_file() else 0):
            behind["files"] = None
        trackers = (state or {}).get("trackers", {})
        for name in self.trackers:
            info = trackers.get(name, {})
            if not info.get("done"):
                behind[name] = info.get("last_error")
        return behind


def _pauses() -> Iterator[float]:
    """The pauses between looks at the agent's state: `POLL`, growing by half each time up to `POLL_MAX`, for ever."""
    pause = POLL
    while True:
        yield pause
        pause = min(POLL_MAX, pause * 1.5)
