"""The Logger API: steps, dump, timer, journal, flush/close, atexit, and
backends or filters that fail without taking the run down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import rltrack
from rltrack.delivery.registry import Backend
from rltrack.core.events import Event
from rltrack.filters import FILTER_TYPES, Filter
from waiting import wait_until

REPO = Path(rltrack.__file__).resolve().parents[1]


def make(tmp_path: Path, backends: tuple[str, ...] = ("memory",), filters: list[dict[str, Any]] | None = None) -> rltrack.Logger:
    cfg = {"run": {"root": str(tmp_path / "runs"), "name": "t"}, "filters": filters or [], "backends": {"use": list(backends)}}
    return rltrack.make_logger(cfg)


def journal(logger: rltrack.Logger, kind: str | None = None) -> list[Event]:
    return [e for e in rltrack.read_journal(logger.run_dir) if kind is None or e.kind == kind]


def meta(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "meta.json").read_text())


# ---- steps ------------------------------------------------------------------


def test_int_step_and_mapping_of_axes(tmp_path: Path) -> None:
    with make(tmp_path) as logger:
        logger.write({"a": 1.0}, step=5)
        logger.write({"b": 2.0}, step={"env_steps": np.int64(2048), "train_iter": 3}, namespace="learner")
        logger.write({"c": 3.0}, step={"train_iter": 4, "env_steps": 4096}, namespace="learner")
    a, b, c = journal(logger, "scalars")
    assert a.steps == {"step": 5} and a.primary_step == 5
    assert b.steps == {"env_steps": 2048, "train_iter": 3} and b.primary_step == 2048
    assert type(b.steps["env_steps"]) is int
    assert list(c.steps) == ["train_iter", "env_steps"] and c.primary_step == 4  # the first axis is the primary one
    memory = logger.backends["memory"]
    assert memory.steps == {"a": [5], "learner/b": [2048], "learner/c": [4]}


def test_a_record_and_its_steps_are_taken_as_they_were_at_the_call(tmp_path: Path) -> None:
    """`write` queues its record for the pipeline thread, which works on it
    later: the dicts a caller reuses and changes after each call must not
    change what was written (a loop outpaces the pipeline thread here)."""
    data: dict[str, float] = {}
    steps: dict[str, int] = {}
    with make(tmp_path) as logger:
        for i in range(3000):
            data["x"], steps["env_steps"], steps["train_iter"] = float(i), 10 * i, i
            logger.write(data, step=steps)
            logger.write(data, step=i, namespace="int_step")
    events = journal(logger, "scalars")
    assert [(e.data, e.steps) for e in events if e.namespace == ""] == [
        ({"x": float(i)}, {"env_steps": 10 * i, "train_iter": i}) for i in range(3000)
    ]
    assert [(e.data, e.steps) for e in events if e.namespace == "int_step"] == [({"x": float(i)}, {"step": i}) for i in range(3000)]


def test_missing_step_inherits_the_last_given_steps(tmp_path: Path) -> None:
    with make(tmp_path) as logger:
        logger.write({"loss": 1.0}, step={"env_steps": 100, "train_iter": 1}, namespace="learner")
        logger.write({"reward": 5.0}, namespace="collector")
        logger.log_text("note", "no step given")
        logger.write({"loss": 2.0}, step={"env_steps": 200, "train_iter": 2}, namespace="learner")
        logger.write({"reward": 6.0}, namespace="evaluator")
    steps = [(e.namespace, e.steps) for e in journal(logger) if e.kind in ("scalars", "text")]
    assert steps == [
        ("learner", {"env_steps": 100, "train_iter": 1}),
        ("collector", {"env_steps": 100, "train_iter": 1}),
        ("", {"env_steps": 100, "train_iter": 1}),
        ("learner", {"env_steps": 200, "train_iter": 2}),
        ("evaluator", {"env_steps": 200, "train_iter": 2}),
    ]


def test_without_any_step_records_are_numbered_per_namespace(tmp_path: Path) -> None:
    with make(tmp_path) as logger:
        for i in range(3):
            logger.write({"x": float(i)}, namespace="a")
            logger.write({"y": float(i)}, namespace="b")
            logger.write({"y": float(i)}, namespace="b")
    memory = logger.backends["memory"]
    assert memory.steps["a/x"] == [0, 1, 2]
    assert memory.steps["b/y"] == [0, 1, 2, 3, 4, 5]


def test_dump_with_a_step_gives_the_aggregated_records_that_step(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    filters = [{"type": "aggregate", "regex": "loss", "stats": ["mean", "max"]}]
    expected = []
    with make(tmp_path, filters=filters) as logger:
        for it in range(3):
            losses = rng.normal(size=16)
            for i, loss in enumerate(losses):
                logger.write({"loss": loss, "lr": 0.1}, step={"train_iter": 16 * it + i}, namespace="learner")
            logger.dump({"train_iter": 16 * it + 15, "env_steps": 1000 * it})
            expected.append((losses.mean(), losses.max()))
        logger.write({"later": 1.0}, namespace="learner")  # takes the steps given to dump
    memory = logger.backends["memory"]
    assert memory.metrics["learner/loss_mean"] == pytest.approx([m for m, _ in expected])
    assert memory.metrics["learner/loss_max"] == pytest.approx([m for _, m in expected])
    aggregated = [e for e in journal(logger, "scalars") if "loss_mean" in e.data]
    assert [e.steps for e in aggregated] == [{"train_iter": 16 * it + 15, "env_steps": 1000 * it} for it in range(3)]
    assert memory.steps["learner/lr"] == list(range(48))  # non-matching keys pass straight through
    assert memory.steps["learner/later"] == [16 * 2 + 15]


def test_timer_records_a_timing_event(tmp_path: Path) -> None:
    with make(tmp_path, backends=("memory", "local")) as logger:
        with logger.timer("collect", step=7):
            time.sleep(0.05)
        with pytest.raises(RuntimeError):
            with logger.timer("failing"):
                raise RuntimeError("still timed")
    timings = journal(logger, "timing")
    assert [e.namespace for e in timings] == ["time", "time"]
    (collect,) = (e for e in timings if "collect" in e.data)
    assert collect.steps == {"step": 7} and 0.05 <= collect.data["collect"] < 2
    assert "failing" in timings[1].data
    assert logger.backends["memory"].metrics["time/collect"] == [collect.data["collect"]]
    assert pd.read_csv(logger.run_dir / "progress.csv")["time/collect"].dropna().tolist() == pytest.approx([collect.data["collect"]])


def test_write_rejects_an_unknown_kind(tmp_path: Path) -> None:
    with make(tmp_path) as logger:
        with pytest.raises(ValueError, match="scalar"):
            logger.write({"x": 1.0}, kind="scalar")


def test_deferred_events_are_built_on_the_pipeline_thread_in_order(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    built_on = []

    def build(value: float) -> list[Event]:
        built_on.append(threading.current_thread().name)
        if value == 3.0:
            raise RuntimeError("bad route")
        return [Event(time.time(), {"x": value}, "scalars", "learner", {"step": int(value)})]

    with make(tmp_path) as logger:
        for i in range(5):
            logger.write({"x": 100.0 + i}, step=i, namespace="learner")
            logger.emit_deferred(lambda i=i: build(float(i)))
    values = [e.data["x"] for e in journal(logger, "scalars")]
    assert values == [100.0, 0.0, 101.0, 1.0, 102.0, 2.0, 103.0, 104.0, 4.0]  # in order; the failing build lost only its own
    assert set(built_on) == {"rltrack-pipeline"}
    errors = json.loads((logger.run_dir / "report.json").read_text())["counts"]["core.errors"]
    assert list(errors) == ["pipeline.deferred: RuntimeError: bad route"]


# ---- journal ----------------------------------------------------------------


def test_journal_holds_every_event_that_left_the_filters(tmp_path: Path) -> None:
    filters = [{"type": "none"}, {"type": "keys", "drop": "^secret"}]
    rng = np.random.default_rng(1)
    records = []
    for i in range(50):
        record: dict[str, Any] = {"loss": float(rng.normal()), "secret_token": 1.0}
        if i % 3 == 0:
            record["eval"] = None
        if i % 10 == 0:
            record = {"eval": None, "secret_x": 2.0}  # nothing survives: the record is dropped
        records.append(record)
    with make(tmp_path, filters=filters) as logger:
        for i, record in enumerate(records):
            logger.write(record, step=i, namespace="learner")
        logger.log_hparams({"lr": 0.1})
        logger.log_text("msg", "hello", step=50)
    expected = [(i, {k: v for k, v in r.items() if v is not None and not k.startswith("secret")}) for i, r in enumerate(records)]
    expected = [(i, d) for i, d in expected if d]
    assert [(e.primary_step, e.data) for e in journal(logger, "scalars")] == expected
    assert [e.data for e in journal(logger, "hparams")] == [{"lr": 0.1}]
    assert [e.data for e in journal(logger, "text")] == [{"msg": "hello"}]
    assert {e.run for e in journal(logger)} == {logger.run_dir.name}
    # the journal and the memory backend saw the same events
    assert [e.to_dict() for e in journal(logger)] == [e.to_dict() for e in logger.backends["memory"].events]


def test_journal_keeps_growing_while_writes_outpace_the_pipeline(tmp_path: Path) -> None:
    """A producer faster than the pipeline must not have everything held in
    memory until it pauses: the journal grows during the burst, while the queue
    still holds a backlog. No time bound: how soon the first bytes come depends
    on the machine's load, not on the design."""
    logger = make(tmp_path, backends=("memory",))
    path = logger.run_dir / "journal.jsonl"
    grew_while_behind = False
    longest_queue = 0
    start = time.monotonic()
    i = 0
    try:
        while not grew_while_behind and i < 500_000 and time.monotonic() - start < 10:
            for _ in range(1000):
                logger.write({"x": float(i)}, step=i)
                i += 1
            queued = len(logger._queue)
            longest_queue = max(longest_queue, queued)
            grew_while_behind = queued > 1000 and path.stat().st_size > 0
    finally:
        logger.close()
    assert longest_queue > 1000, "the producer did not outpace the pipeline; the test proves nothing"
    assert grew_while_behind, f"the journal stayed empty during the whole burst of {i} records"
    assert [e.data["x"] for e in journal(logger)] == [float(n) for n in range(i)]


# ---- flush / close ----------------------------------------------------------


def test_close_drains_everything(tmp_path: Path) -> None:
    logger = make(tmp_path, backends=("local", "memory"))
    n = 10_000
    for i in range(n):
        logger.write({"reward": float(i), "loss": float(-i)}, step={"env_steps": i})
    assert logger.close(timeout=120) is True  # the default 5 s is a wall-clock bound a loaded machine missed
    events = journal(logger, "scalars")
    assert [e.data["reward"] for e in events] == [float(i) for i in range(n)]
    df = pd.read_csv(logger.run_dir / "progress.csv")
    assert len(df) == n
    assert (df["env_steps"].to_numpy() == np.arange(n)).all()
    assert (df["loss"].to_numpy() == -np.arange(n)).all()
    assert meta(logger.run_dir)["status"] == "finished"


def pipeline_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rltrack-") and not t.name.startswith("rltrack-agent")]


def test_the_loggers_of_a_process_share_one_pipeline_thread(tmp_path: Path) -> None:
    """A Tune driver holds a logger per trial: one thread runs them all (a
    thread each, 64 waking 4 times a second, took the GIL from Tune's loop),
    and it ends with the last of them."""
    loggers = [rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": f"trial{i}"}, "backends": {"use": ["memory"]}})
               for i in range(16)]  # fmt: skip
    for i, logger in enumerate(loggers):
        for step in range(300):
            logger.write({"x": float(i * 1000 + step)}, step=step)
    assert len(pipeline_threads()) == 1
    for logger in loggers[::2]:  # closing some leaves the others served
        assert logger.close() is True
    for logger in loggers[1::2]:
        logger.write({"x": -1.0}, step=300)
        assert logger.close() is True
    for i, logger in enumerate(loggers):
        extra = [-1.0] if i % 2 else []
        assert [e.data["x"] for e in journal(logger, "scalars")] == [float(i * 1000 + step) for step in range(300)] + extra
    wait_until(lambda: pipeline_threads() == [], 30, lambda: f"the pipeline thread to end: {pipeline_threads()}", every=0.01)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_logger_made_in_a_forked_child_gets_a_pipeline_thread_of_its_own(tmp_path: Path) -> None:
    parent = make(tmp_path)
    parent.write({"x": 1.0}, step=0)
    assert parent.flush(timeout=10)
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread did not come along
        code = 1
        try:
            child = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "child"}, "backends": {"use": ["memory"]}})
            for step in range(100):
                child.write({"y": float(step)}, step=step)
            ok = child.close(timeout=10) and [e.data["y"] for e in journal(child, "scalars")] == [float(s) for s in range(100)]
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent.write({"x": 2.0}, step=1)
    assert parent.close() is True
    assert [e.data["x"] for e in journal(parent, "scalars")] == [1.0, 2.0]


def test_flush_close_and_idempotency(tmp_path: Path) -> None:
    logger = make(tmp_path, backends=("local",))
    logger.write({"x": 1.0}, step=1)
    assert logger.flush(timeout=10) is True
    assert len(journal(logger)) == 1  # flush means on disk, not just handed over
    assert logger.close(timeout=10) is True
    assert logger.close() is True
    assert logger.close(timeout=0) is True
    assert logger.flush(timeout=1) is True
    assert meta(logger.run_dir)["status"] == "finished"
    report = json.loads((logger.run_dir / "report.json").read_text())
    assert report["counts"].get("core.errors") is None


def test_records_after_close_are_dropped_with_one_warning(tmp_path: Path) -> None:
    logger = make(tmp_path, backends=("local",))
    logger.write({"x": 1.0}, step=1)
    logger.close()
    with pytest.warns(RuntimeWarning, match="closed") as warned:
        for i in range(100):
            logger.write({"x": 2.0}, step=2 + i)
        logger.dump()
        logger.log_checkpoint({"w": 1}, iteration=5)
    assert len(warned) == 1
    assert len(logger._queue) == 0  # nothing piles up for a thread that is gone
    assert [e.data for e in journal(logger)] == [{"x": 1.0}]
    assert not (logger.run_dir / "ckpt" / "iteration_5.pth.tar").exists()


CHILD = """
import sys, rltrack
logger = rltrack.make_logger({{"run": {{"root": {root!r}, "name": "child"}}, "backends": {{"use": ["local"]}}}})
print(logger.run_dir, flush=True)
for i in range(2000):
    logger.write({{"x": float(i)}}, step=i)
{ending}
"""


@pytest.mark.parametrize(
    ("ending", "status"),
    [("", "finished"), ("raise ValueError('boom')", "failed"), ("raise KeyboardInterrupt", "killed")],
)
def test_atexit_closes_a_logger_left_open(tmp_path: Path, ending: str, status: str) -> None:
    script = CHILD.format(root=str(tmp_path / "runs"), ending=ending)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode == 0) == (status == "finished"), done.stderr
    run_dir = Path(done.stdout.splitlines()[0])
    assert meta(run_dir)["status"] == status
    assert [e.data["x"] for e in rltrack.read_journal(run_dir)] == [float(i) for i in range(2000)]
    assert len(pd.read_csv(run_dir / "progress.csv")) == 2000


# ---- failures stay contained -------------------------------------------------


class BoomBackend(Backend):
    """Fails at every call after open."""

    name = "boom"

    def write(self, events: list[Event]) -> None:
        raise RuntimeError("tracker is down")

    def dump(self) -> None:
        raise RuntimeError("tracker is down")

    def flush(self) -> None:
        raise OSError("disk full")

    def close(self, status: str) -> None:
        raise RuntimeError("tracker is down")


def test_a_failing_backend_does_not_take_the_run_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    with make(tmp_path, backends=(f"{__name__}:BoomBackend", "local", "memory")) as logger:
        for i in range(100):
            logger.write({"x": float(i)}, step=i)
            if i % 10 == 9:
                logger.dump()
        assert logger.flush(timeout=120)  # the agent writes progress.csv: a cold agent on a loaded machine took over 10 s
    assert logger.backends["memory"].metrics["x"] == [float(i) for i in range(100)]
    assert pd.read_csv(logger.run_dir / "progress.csv")["x"].tolist() == [float(i) for i in range(100)]
    assert meta(logger.run_dir)["status"] == "finished"
    errors = json.loads((logger.run_dir / "report.json").read_text())["counts"]["core.errors"]
    assert sum(n for reason, n in errors.items() if "tracker is down" in reason) >= 11  # every write batch + dumps + close
    assert any("disk full" in reason for reason in errors)
    printed = [line for line in capfd.readouterr().err.splitlines() if line.startswith("rltrack: boom")]  # the summary lists it too
    assert len(printed) == 1, printed


class BoomFilter(Filter):
    """Raises on records carrying the key `poison`."""

    def apply(self, event: Event) -> list[Event]:
        if "poison" in event.data:
            raise ZeroDivisionError("bad filter")
        return [event]


def test_a_failing_filter_does_not_stop_the_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FILTER_TYPES, "boom", BoomFilter)
    with make(tmp_path, filters=[{"type": "boom"}]) as logger:
        for i in range(20):
            logger.write({"poison": 1.0} if i % 5 == 0 else {"x": float(i)}, step=i)
        assert logger.flush(timeout=10)
    assert logger.backends["memory"].metrics["x"] == [float(i) for i in range(20) if i % 5]
    assert meta(logger.run_dir)["status"] == "finished"
    errors = json.loads((logger.run_dir / "report.json").read_text())["counts"]["core.errors"]
    assert sum(n for reason, n in errors.items() if "bad filter" in reason) == 4


def test_a_run_whose_values_changed_says_so_once_at_close_and_in_rltrack_show(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with make(tmp_path, backends=("local",)) as logger:
        logger.write({"ok": 1.0}, step=0)
    assert "values changed on the way" not in capfd.readouterr().err  # nothing happened: nothing said
    with make(tmp_path, backends=("local",)) as logger:  # lossless: numpy scalars to floats, an array to a histogram
        logger.write({"f32": np.float32(0.5), "i64": np.int64(3), "arr": np.zeros(3)}, step=0)
    assert "values changed on the way" not in capfd.readouterr().err
    counts = json.loads((logger.run_dir / "report.json").read_text())["counts"]
    assert counts["core.converted"] == {"float32 -> float": 1, "int64 -> int": 1} and counts["core.routed"] == {"ndarray -> histogram": 1}
    with make(tmp_path, backends=("local",)) as logger:
        logger.write({"none": None, "obj": object(), "arr": np.zeros(3)}, step=0)
    err = capfd.readouterr().err
    assert err.count("values changed on the way") == 1 and "core.dropped" in err and "core.routed" not in err
    from rltrack.cli import entry as cli

    assert cli.main(["show", str(logger.run_dir)]) == 0
    out = capfd.readouterr().out
    assert "report.json:" in out and "core.dropped" in out and "core.routed" in out  # `rltrack show` says everything


class NoInt:
    """A step value whose `int()` raises something other than TypeError/ValueError."""

    def __int__(self) -> int:
        raise RuntimeError("no int for you")


def test_a_step_whose_int_raises_costs_that_step_only(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`dump(step=x)` with `int(x)` raising stopped the logger for good: 100
    of 200 records journaled, meta.json `running` forever, close True (issue 27)."""
    logger = make(tmp_path)
    for i in range(200):
        logger.write({"x": float(i)}, step=i)
        if i == 99:
            logger.dump(step=NoInt())
    logger.write({"y": 1.0}, step={"env_steps": NoInt(), "train_iter": 7})
    assert logger.close(timeout=30)
    assert [e.data["x"] for e in journal(logger, "scalars") if "x" in e.data] == [float(i) for i in range(200)]
    (y,) = [e for e in journal(logger, "scalars") if "y" in e.data]
    assert y.steps == {"train_iter": 7}  # the axis that is no integer is dropped, the record kept
    assert meta(logger.run_dir)["status"] == "finished"
    dropped = json.loads((logger.run_dir / "report.json").read_text())["counts"]["core.dropped"]
    assert sum(n for reason, n in dropped.items() if "is not an integer" in reason) == 2


def test_close_is_false_when_a_record_written_never_reached_the_journal(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    logger = make(tmp_path)
    logger.write({"x": 1.0}, step=1)
    logger.emit_deferred(lambda: [1 / 0])  # an adapter's build that raises: its records are lost
    logger.write({"x": 2.0}, step=2)
    assert logger.close(timeout=30) is False
    assert [e.data["x"] for e in journal(logger, "scalars")] == [1.0, 2.0]
    assert meta(logger.run_dir)["status"] == "finished"
    err = capfd.readouterr().err
    assert "ZeroDivisionError" in err and "1 records written are not in the journal" in err
