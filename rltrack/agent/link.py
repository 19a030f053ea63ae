"""A logger's link to the agent: its run registered, an agent kept running,
and the waits of `flush` and `close` on what the agent has done.

See rltrack.agent.files for the directory both sides share and
rltrack.agent.process for the agent.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from rltrack.agent.files import (
    LAUNCH_ENV,
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
from rltrack.core.turns import time_left

#: The waits on the agent look at the writer's state first after `POLL`
#: seconds, then less and less often, up to every `POLL_MAX`: a Tune driver
#: has a closing logger waiting per trial that ended, on its own process's GIL.
POLL, POLL_MAX = 0.02, 0.2
#: Seconds between the checks that an agent runs (starting one if not), for
#: all the loggers of a process together: a Tune driver holds one per trial,
#: and each check takes a lock file.
CHECK_EVERY = 1.0
#: Seconds a tracker fails every batch (a server down) before the training
#: process says so, once: an outage of a few seconds is the agent's business.
TELL_FAILING_AFTER = 10.0
_checked_at: dict[Path, float] = {}  # agent directory -> when this process last checked it
#: Tracker name -> the writers (registration keys) of this process it refuses
#: every batch of: an outage is said once per process (a Tune driver holds a
#: logger per trial), naming how many runs wait, and again only after every
#: one of them was delivered to again.
_FAILING: dict[str, set[str]] = {}
_OUTAGES_TOLD: set[str] = set()


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
            "launch": os.environ.get(LAUNCH_ENV),
        }
        write_private(registration_path(self.dir, self.key), self._registration)
        self._told: set[str] = set()  # the errors (and trackers' errors that cannot heal) said on stderr already
        #: Whether the agent ended this writer (delivered, or gave up) by the last `left_behind`.
        self.gave_up = False
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

    def finish(self, status: str, deadline: float | None, journal: Path) -> dict[str, str | None]:
        """Tells the agent the run ended with `status` (the journal is
        complete) and waits for it to deliver everything until `deadline`
        (None: as long as it takes). Returns what is left behind then (see
        `left_behind`), empty when everything was delivered."""
        write_private(registration_path(self.dir, self.key), {**self._registration, "status": status})
        return self.left_behind(deadline, journal)

    def left_behind(self, deadline: float | None, journal: Path) -> dict[str, str | None]:
        """Waits until the agent is done with this writer or `deadline`
        passed, then says what it left behind: {"files" or tracker name: its
        last error or None}; empty when everything was delivered. The agent
        counts what it left as pending in report.json."""
        state, done = self._wait(lambda state: bool(state.get("done")), deadline)
        self._tell_agent_errors(state)
        behind = state.get("pending", {}) if done and state else self._behind(state, journal)
        if not done and not behind:  # the agent has not ended the writer yet: its local files are not complete
            behind = {"files": None} if self._registration["files"] else dict.fromkeys(self.trackers)
        self.gave_up = done
        for tracker in self.trackers:  # this writer's state is not watched any more
            self._note_outage(tracker, False)
        if done:
            with contextlib.suppress(FileNotFoundError):  # a second look after close
                os.unlink(self.dir / "runs" / f"{self.key}.state.json")
        return behind

    def say_left_behind(self, behind: Mapping[str, str | None]) -> None:
        """One line on stderr: what the agent had not delivered when the wait
        ended, and how to finish it (errors already told are not repeated)."""
        errors = "; ".join(f"{name}: {error}" for name, error in behind.items() if error and name not in self._told and error not in self._told)
        trackers = [name for name in behind if name != "files"]
        print(
            f"rltrack: {self.run_dir}: {', '.join(behind)} "
            + ("not delivered" if self.gave_up else "not done at close")
            + (f" ({errors})" if errors else "")
            + ("" if self.gave_up else "; the agent goes on delivering (`rltrack status`)")
            + ((("; fix what the error says, then" if any(behind.values()) else "; then") if self.gave_up else "; to finish now") + f": rltrack sync {self.run_dir} --to {' --to '.join(trackers)}" if trackers else ""),
            file=sys.stderr,
        )

    def _tell_agent_errors(self, state: dict[str, Any] | None) -> None:
        """The first error of each of the agent's parts for this writer (a
        backend it could not open, a local file it could not write), each once."""
        for error in (state or {}).get("errors", []):
            if error not in self._told:
                self._told.add(error)
                print(f"rltrack: {error} (further errors are counted in {self.run_dir / 'report.json'})", file=sys.stderr)

    def tell_errors(self) -> None:
        """Says on stderr while training runs, once each, the agent's errors
        for this writer, a tracker's error that retrying cannot heal
        (credentials, an unknown project, a bad URI), which the agent tries
        again only after minutes, and a tracker that has failed every batch
        for `TELL_FAILING_AFTER` seconds (a server down: retried with backoff)."""
        state = read_state(self.dir, self.key)
        self._tell_agent_errors(state)
        for name, info in ((state or {}).get("trackers") or {}).items():
            if info.get("fix") and name not in self._told:
                self._told.add(name)
                print(
                    f"rltrack: {name} refuses {self.run_dir}: {info.get('last_error')}; retrying cannot help: {info['fix']}. "
                    f"The journal keeps every value; once fixed: rltrack sync {self.run_dir} --to {name}",
                    file=sys.stderr,
                )
            since = info.get("failing_since")
            failing = since is not None and not info.get("fix")
            self._note_outage(name, failing)
            if failing and time.time() - since >= TELL_FAILING_AFTER and name not in _OUTAGES_TOLD:
                _OUTAGES_TOLD.add(name)
                waiting = len(_FAILING[name])
                runs = f"{self.run_dir}" if waiting == 1 else f"{waiting} runs of this process, e.g. {self.run_dir}"
                print(
                    f"rltrack: {name} has refused every batch of {runs} for {time.time() - since:.0f} s ({info.get('last_error')}); "
                    "the agent retries with backoff and the journal keeps every value (`rltrack status`)",
                    file=sys.stderr,
                )

    def _note_outage(self, tracker: str, failing: bool) -> None:
        """Counts this writer among those `tracker` refuses (or not any more); the
        outage may be said again once it refuses none of this process's writers."""
        writers = _FAILING.setdefault(tracker, set())
        if failing:
            writers.add(self.key)
            return
        writers.discard(self.key)
        if not writers:
            _OUTAGES_TOLD.discard(tracker)

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
