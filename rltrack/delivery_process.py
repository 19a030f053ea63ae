"""Tracker delivery in a child process, so trackers never compete with training.

MLflow, W&B and Neptune clients spend far more CPU per record than training
code logging it (SQLAlchemy work per metric, protobuf building, operation
serialisation), and in one CPython process that CPU holds the GIL the training
thread needs. With `[backends] delivery = "process"` (the default) the
training process only journals; one child process per logger runs the same
`DeliveryWorker`s `rltrack sync` runs, following the journal as it grows, on
another core. The journal and the cursors are the only things shared, so
nothing is lost or doubled whichever process stops first.

The protocol is two JSON lines on the child's stdin and one on its stdout:
the run (directory, writer, the trackers' settings, which may hold secrets and
so are never put on a command line), then, at `Logger.close`, the final status
and the time left; the child finishes every worker within that time and
answers with its report (counts and renames, merged into the run's
report.json) and the trackers not caught up, with their last errors. If the
training process dies without closing, the child's stdin ends: it stops at
once, as the delivery threads of a crashed process would, and `rltrack sync`
delivers the rest. The child runs at a lower priority (`NICENESS`), and in a
session of its own, so a terminal's Ctrl-C (sent to the whole foreground
process group) reaches only the training process, which closes the run as
`killed` and has the child deliver it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import rltrack
from rltrack.backends.base import RunContext
from rltrack.delivery import DeliveryWorker, finish_all, time_left
from rltrack.report import Report

#: The child's niceness, added to the training process's: delivery is background
#: work (its backlog waits on disk), so a busy machine gives the CPU to training
#: first. wandb-core, started by the W&B client in the child, inherits it.
NICENESS = 10
#: Seconds the training process waits beyond the delivery timeout for the
#: child to answer (ending tracker runs, printing its report) before killing it.
ANSWER_GRACE = 10.0


class DeliveryProcess:
    """The training process's handle on the child that feeds its trackers."""

    def __init__(self, run_dir: Path, writer: str | None, name: str, config: Mapping[str, Any], settings: Mapping[str, Mapping[str, Any]]) -> None:
        self.names = list(settings)
        spec = {"run_dir": str(run_dir), "writer": writer, "name": name, "config": config, "backends": settings}
        source_root = str(Path(rltrack.__file__).resolve().parents[1])  # the child imports this rltrack, installed or not
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
        self._child = subprocess.Popen(
            [sys.executable, "-m", "rltrack.delivery_process"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, encoding="utf-8", start_new_session=True,
        )  # fmt: skip
        self._send(spec)

    def finish(self, status: str, deadline: float | None) -> tuple[dict[str, Any], dict[str, str | None]]:
        """Tells the child the run ended with `status`; waits for its answer
        until `deadline` (see `time_left`; plus a grace to end the tracker
        runs), then kills it. Returns the child's report and the trackers not
        caught up, each with its last error."""
        timeout = time_left(deadline)
        everything_pending: dict[str, str | None] = dict.fromkeys(self.names, "the delivery process did not answer")
        if not self._send({"status": status, "timeout": timeout}):
            return {}, dict.fromkeys(self.names, f"the delivery process ended early (exit code {self._child.poll()})")
        try:
            out, _ = self._child.communicate(timeout=None if timeout is None else timeout + ANSWER_GRACE)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.communicate()
            return {}, everything_pending
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return {}, everything_pending
        return answer["report"], answer["pending"]

    def _send(self, message: dict[str, Any]) -> bool:
        """One line to the child; False if it is gone."""
        try:
            assert self._child.stdin is not None
            self._child.stdin.write(json.dumps(message, default=str) + "\n")
            self._child.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False


def main() -> None:
    """The child: deliver the journal to each tracker until told the run ended."""
    os.nice(NICENESS)
    answer = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the trackers' own prints (and their subprocesses') go to stderr, never into the answer
    sys.stdout = sys.stderr
    # here, not at the top: config imports the pipeline, which imports this module
    from rltrack.config import build_backend

    spec = json.loads(sys.stdin.readline())
    run_dir = Path(spec["run_dir"])
    report = Report()
    context = RunContext(run_dir=run_dir, name=spec["name"], config=spec["config"], report=report, worker=spec["writer"])
    workers = []
    for name, settings in spec["backends"].items():
        backend = build_backend(name, settings, "the run's config")
        backend.open(context)
        workers.append(DeliveryWorker(backend, run_dir, spec["writer"]))
    for worker in workers:
        worker.start()
    line = sys.stdin.readline()
    if not line:  # the training process is gone without closing the run: leave the rest to `rltrack sync`
        os._exit(0)
    end = json.loads(line)
    pending = finish_all(workers, end["status"], None if end["timeout"] is None else time.monotonic() + end["timeout"])
    answer.write(json.dumps({"report": report.as_dict(), "pending": pending}) + "\n")
    answer.flush()
    if pending:  # a tracker call that hangs would hold the interpreter's exit: leave now
        os._exit(0)


if __name__ == "__main__":
    main()
