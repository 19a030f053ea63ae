"""Tracker delivery in a child process, so trackers never compete with training.

MLflow, W&B and Neptune clients spend far more CPU per record than training
code logging it (SQLAlchemy work per metric, protobuf building, operation
serialisation), and in one CPython process that CPU holds the GIL the training
thread needs. With `[backends] delivery = "process"` (the default) one
child process per logger runs the same `DeliveryWorker`s `rltrack sync` runs,
following the journal as it grows, on another core. The journal and the cursors are the only things shared, so
nothing is lost or doubled whichever process stops first.

Unless a backend's output must stay in the training process (memory, the
console), the child runs the pipeline as well, and is started for that alone
when there are no trackers: the filters, the journal and the local files
(TensorBoard, text tables, progress.csv) cost far more than training's own
logging calls, and under the training process's GIL they would add to every
step (with the local directory alone, `bench_training.py`'s stress step ran
1.18x slower than without logging with the pipeline in the training process,
1.04x with it in the child). The training process's pipeline thread then only fills in
steps, normalises and redacts each record (its values are then plain and
picklable) and sends them in batches; meta.json and the config files stay with
it. Records in the pipe when training dies still reach the journal: the child
reads to the end of its stdin before it stops. If the child dies first, the
training process's pipeline thread takes the pipeline over (`Logger._take_over`).

The protocol, on the child's stdin, is length-prefixed pickles: the run
(directory, writer, the run's config, the trackers' settings, which may hold
secrets and so are never put on a command line), then batches of records and
calls (`dump`, `flush`, checkpoints) when the child runs the pipeline, then,
at `Logger.close`, the final status and the time left. The child answers with
JSON lines on its stdout: each flush once done, then its report (counts and
renames, merged into the run's report.json) and whether every tracker has
everything; it tells the user itself how to deliver what is pending. If the
training process dies without closing, the child's stdin ends: it stops, as
the delivery threads of a crashed process would, and `rltrack sync` delivers
the rest (waiting for the child's cursor locks, see `rltrack.delivery`). The
child runs at a lower priority (`NICENESS`, given to its session as well,
and as a batch process that never preempts training when it wakes up), and
in a session of its own, so a terminal's Ctrl-C (sent to the whole
foreground process group) reaches only the training process, which closes
the run as `killed` and has the child deliver it.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Mapping

import rltrack
from rltrack.backends.base import RunContext
from rltrack.delivery import DeliveryWorker, finish_all, say_pending, time_left
from rltrack.events import Event
from rltrack.report import Report

#: The child's niceness, added to the training process's: delivery is background
#: work (its backlog waits on disk), so a busy machine gives the CPU to training
#: first. wandb-core, started by the W&B client in the child, inherits it.
NICENESS = 10
#: Seconds the training process waits beyond the delivery timeout for the
#: child to answer (ending tracker runs, printing its report) before killing it.
ANSWER_GRACE = 10.0
#: Each message to the child: its length, then the pickle.
FRAME = struct.Struct("<I")


class DeliveryProcess:
    """The training process's handle on the child that feeds its trackers."""

    def __init__(
        self, run_dir: Path, writer: str | None, name: str, config: Mapping[str, Any], settings: Mapping[str, Mapping[str, Any]],
        *, pipeline: bool = False, resumed: bool = False,
    ) -> None:  # fmt: skip
        """`pipeline`: the child also runs the pipeline (filters, journal, local
        files) on what `send` hands it, instead of following the journal."""
        self.names = list(settings)
        spec = {"run_dir": str(run_dir), "writer": writer, "name": name, "config": config, "backends": settings,
                "pipeline": pipeline, "resumed": resumed}  # fmt: skip
        source_root = str(Path(rltrack.__file__).resolve().parents[1])  # the child imports this rltrack, installed or not
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
        self._child = subprocess.Popen(
            [sys.executable, "-m", "rltrack.delivery_process"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True,
        )  # fmt: skip
        self._sending = threading.Lock()
        self._flushes: dict[int, threading.Event] = {}
        self._sent: set[int] = set()  # flushes in batches the child was sent, not yet answered
        self._flush_count = 0
        self._answer: dict[str, Any] | None = None
        self._answered = threading.Event()
        self._gone = False  # the child's answers have ended
        threading.Thread(target=self._read_answers, name="rltrack-delivery-answers", daemon=True).start()
        self.send(spec)

    def send(self, message: Any) -> bool:
        """One message to the child; False if it is gone. Raises if `message`
        cannot be pickled."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._sending:
            try:
                assert self._child.stdin is not None
                self._child.stdin.write(FRAME.pack(len(data)) + data)
                self._child.stdin.flush()
                return True
            except (OSError, ValueError):
                return False

    def send_batch(self, entries: list[tuple[str, Any]]) -> bool:
        """Records and calls for the child's pipeline; False if it is gone.
        A flush among them is set when the child answers it, or as soon as
        the child is found gone; a flush in a batch that could not be sent
        waits for `release_flushes` (the training process writes what came
        before it first)."""
        if not self.send(("batch", entries)):
            return False
        with self._sending:
            self._sent.update(number for tag, number in entries if tag == "flush")
            if self._gone:
                self._release_sent()
        return True

    def flush_entry(self, done: threading.Event) -> tuple[str, int]:
        """The batch entry asking the child to answer once everything before it
        is in the journal and files; `done` is set then (see `send_batch`)."""
        self._flush_count += 1
        self._flushes[self._flush_count] = done
        return ("flush", self._flush_count)

    def release_flushes(self) -> None:
        """Sets every flush not answered: the child is gone, and what came before them is written (or lost)."""
        with self._sending:
            for done in self._flushes.values():
                done.set()
            self._flushes.clear()
            self._sent.clear()

    def _release_sent(self) -> None:
        """Sets the flushes the child was sent and will never answer (called holding `_sending`)."""
        for number in self._sent:
            done = self._flushes.pop(number, None)
            if done is not None:
                done.set()
        self._sent.clear()

    def exit_code(self) -> int | None:
        """The child's exit code (negative: the signal that ended it), None while it runs."""
        return self._child.poll()

    def finish(self, status: str, deadline: float | None) -> tuple[dict[str, Any], bool, dict[str, str | None]]:
        """Tells the child the run ended with `status`; waits for its answer
        until `deadline` (see `time_left`; plus a grace to end the tracker
        runs), then kills it. Returns the child's report, whether everything
        was delivered, and the trackers the child could not report on itself
        (it tells the user about the others), each with its last error."""
        timeout = time_left(deadline)
        if not self.send(("close", status, timeout)):
            return {}, False, dict.fromkeys(self.names, f"the delivery process ended early (exit code {self.exit_code()})")
        self._answered.wait(None if timeout is None else timeout + ANSWER_GRACE)
        if self._answer is None:
            self._child.kill()
            return {}, False, dict.fromkeys(self.names, "the delivery process did not answer")
        try:  # the trackers' clients end their own processes at the child's exit
            self._child.wait(ANSWER_GRACE)
        except subprocess.TimeoutExpired:
            pass
        return self._answer["report"], self._answer["complete"], {}

    def _read_answers(self) -> None:
        assert self._child.stdout is not None
        for line in self._child.stdout:
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if "flushed" in answer:
                with self._sending:
                    self._sent.discard(answer["flushed"])
                    self._flushes.pop(answer["flushed"]).set()
            else:
                self._answer = answer
                self._answered.set()
        with self._sending:  # the child is gone: what it was sent will not be answered
            self._gone = True
            self._release_sent()
        self._answered.set()


def pack_event(event: Event) -> tuple[Any, ...]:
    """An event as a plain tuple: pickled several times faster than the dataclass."""
    return (event.time, event.data, event.kind, event.namespace, event.steps, event.source, event.run, event.preaggregated)


def unpack_event(packed: tuple[Any, ...]) -> Event:
    time_, data, kind, namespace, steps, source, run, preaggregated = packed
    return Event(time_, data, kind, namespace, steps, source=source, run=run, preaggregated=preaggregated)


def main() -> None:
    """The child: run the pipeline (if asked) and deliver the journal to each
    tracker until told the run ended, or until the training process is gone."""
    os.nice(NICENESS)
    _batch_policy()
    _nice_session()
    answers = _Answers(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    os.dup2(2, 1)  # the trackers' own prints (and their subprocesses') go to stderr, never into the answers
    sys.stdout = sys.stderr
    spec = _receive()
    if spec["pipeline"]:
        _run_pipeline(spec, answers)
    else:
        _follow_journal(spec, answers)


def _batch_policy() -> None:
    """Linux's SCHED_BATCH: the child's CPU share is its niceness's, as before,
    but waking up (a batch arriving in its pipe, a tracker's answer) never
    preempts the thread running: in side-by-side runs of the stress loop of
    `bench/bench_training.py` (its numpy step, 4,000 steps) training ran 1.15x
    slower than without logging without it, 1.10x with it, the child's CPU time
    the same. The trackers' own processes (wandb-core) inherit it."""
    if hasattr(os, "sched_setscheduler"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:  # not allowed here: the niceness alone stays
            pass


def _nice_session() -> None:
    """The child's niceness given to its session as well. Where the kernel
    groups processes by session (Linux's autogroups, on unless processes are
    placed in CPU cgroups), it shares the CPU between sessions first, each
    session's weight set by the niceness of its autogroup, and only then
    between a session's processes by their own niceness. The child is in a
    session of its own, so without this its `os.nice` ranked it only against
    its own threads, and it took as much of a core as training whenever the
    two shared one: in A/B runs of the stress step of `bench/bench_training.py`
    (8 each, alternating) the training thread waited 7.6 µs a step for a CPU
    without it, 2.8 µs with it (its run-queue delay, /proc schedstat)."""
    try:
        with open(f"/proc/{os.getppid()}/autogroup") as parent:  # "/autogroup-<n> nice <value>"
            fields = parent.read().split()
        # empty where training is in the root autogroup (started by init, no
        # session of its own): its threads then compete one by one, each at
        # the process's niceness, which the child's own already sits below
        niceness = int(fields[-1]) + NICENESS if fields else os.getpriority(os.PRIO_PROCESS, 0)
        with open("/proc/self/autogroup", "w") as own:
            own.write(str(min(niceness, 19)))
    except (OSError, ValueError):  # no autogroups: not Linux, or a kernel built without them
        pass


def _follow_journal(spec: dict[str, Any], answers: _Answers) -> None:
    # here, not at the top: config imports the pipeline, which imports this module
    from rltrack.config import build_backend

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
    end = _receive()
    if end is None:  # the training process is gone without closing the run: leave the rest to `rltrack sync`
        os._exit(0)
    _, status, timeout = end
    pending = finish_all(workers, status, None if timeout is None else time.monotonic() + timeout)
    for name, last_error in pending.items():
        say_pending(report, run_dir, name, last_error)
    answers.send({"report": report.as_dict(), "complete": not pending})
    if pending:  # a tracker call that hangs would hold the interpreter's exit: leave now
        os._exit(0)


def _run_pipeline(spec: dict[str, Any], answers: _Answers) -> None:
    """A `Logger` of this process, without the run's meta files (the training
    process keeps those), fed with what the training process sends."""
    from rltrack.config import build_backend, build_chain
    from rltrack.pipeline import Logger
    from rltrack.redact import Redactor

    config, where = spec["config"], "the run's config"
    report = Report()
    chain = build_chain(config["filters"], where, report)
    local = [build_backend(name, config["backends"].get(name, {}), where) for name in config["backends"]["use"] if name not in spec["backends"]]
    remote = [build_backend(name, settings, where) for name, settings in spec["backends"].items()]
    logger = Logger(
        Path(spec["run_dir"]), config, chain, [*local, *remote], report, [], Redactor(config["run"]["redact"]),
        resumed=spec["resumed"], delivery_child=True,
    )  # fmt: skip
    while True:
        message = _receive()
        if message is None:  # the training process died: what arrived reaches the journal and files; trackers are for `rltrack sync`
            logger.flush()
            os._exit(0)
        if message[0] == "close":
            _, status, timeout = message
            complete = logger.close(timeout, status)
            answers.send({"report": report.as_dict(), "complete": complete})
            if not complete:  # a tracker call that hangs would hold the interpreter's exit: leave now
                os._exit(0)
            return
        for tag, value in message[1]:
            if tag == "event":
                logger.emit(unpack_event(value))
            elif tag == "record":
                logger.emit_complete(unpack_event(value))
            elif tag == "dump":
                logger.dump(value)
            elif tag == "flush":
                threading.Thread(target=_answer_flush, args=(logger, answers, value), daemon=True).start()


def _answer_flush(logger: Any, answers: _Answers, number: int) -> None:
    logger.flush()
    answers.send({"flushed": number})


class _Answers:
    """JSON lines to the training process, from any thread of the child."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def send(self, answer: dict[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(answer) + "\n")
            self._out.flush()


def _receive() -> Any:
    """The next message from the training process; None once it is gone."""
    stdin = sys.stdin.buffer
    head = stdin.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (length,) = FRAME.unpack(head)
    data = stdin.read(length)
    return None if len(data) < length else pickle.loads(data)


if __name__ == "__main__":
    main()
