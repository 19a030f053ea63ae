"""A tracker outage costs training nothing and loses nothing.

A real `mlflow server` (tests/helpers/mlflow_server.py) is stopped in the
middle of a run that keeps logging at a steady rate, until the agent has been
failing to reach it for OUTAGE_SECONDS (five tries, backing off 0.5, 1, 2, 4 s),
then started again: every value must arrive exactly once, the training
thread's `write` must stay cheap during the outage (the p99 of its CPU time,
which a busy machine does not inflate), and memory must stay flat (the backlog
is the journal on disk). A server that never comes back must not hold
`close(timeout)` (how soon it returns: bench/bench_outage.py), and the report
must say what is pending and how to deliver it. Figures are printed for
docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import psutil
import pytest

import rltrack
from mlflow_server import history, tracker
from reliability_helpers import failing_since
from rltrack.delivery.cursor import Cursor
from waiting import wait_until

pytest_plugins = ["mlflow_server"]

OUTAGE_SECONDS = 8  # how long the agent has been failing when the server comes back
RATE = 500  # records per second, as a fast training loop logs


def make(root: Path, uri: str, name: str) -> rltrack.Logger:
    return rltrack.make_logger({"run": {"root": str(root), "name": name}, "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": uri}}})


class Loop:
    """A training loop writing at `RATE`, timing each `write` (the training thread's CPU time)."""

    def __init__(self, logger: rltrack.Logger) -> None:
        self.logger = logger
        self.written = 0

    def run(self, seconds: float) -> list[float]:
        took = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.thread_time()
            self.logger.write({"reward": float(self.written), "loss": -float(self.written)}, step=self.written)
            took.append(time.thread_time() - start)
            self.written += 1
            time.sleep(1 / RATE)
        return took


def started(root: Path, uri: str, name: str, seconds: float) -> Loop:
    """A loop that has logged for `seconds` and whose first records reached the server."""
    loop = Loop(make(root, uri, name))
    loop.run(seconds)
    wait_until(lambda: Cursor(loop.logger.run_dir, "mlflow").delivered > 0, 120, "the first records to reach the server")
    return loop


def failing_for(run_dir: Path) -> float:
    """How long the agent has been failing to deliver `run_dir` to MLflow (0: it is not failing)."""
    since = failing_since(run_dir, "mlflow")
    return 0.0 if since is None else time.time() - since


@pytest.mark.slow
def test_an_outage_loses_nothing_doubles_nothing_and_costs_training_nothing(mlflow_server, tmp_path, capsys, monkeypatch):
    # MLflow's client retries a refused request itself (7 times, backing off), which can carry
    # a batch through the whole outage unseen; with none, rltrack's own retry is what is tested
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    loop = started(tmp_path, mlflow_server.uri, "outage", 2)
    logger = loop.logger
    process = psutil.Process()
    rss_before = process.memory_info().rss
    mlflow_server.stop()
    during: list[float] = []
    try:
        # the loop runs on this thread: the condition writes for half a second at a time
        wait_until(lambda: during.extend(loop.run(0.5)) or failing_for(logger.run_dir) >= OUTAGE_SECONDS, 120,
                   lambda: f"the agent to fail {OUTAGE_SECONDS} s at reaching the stopped server (failing for {failing_for(logger.run_dir):.0f} s)")  # fmt: skip
        rss_after = process.memory_info().rss
    finally:
        mlflow_server.start()
    loop.run(2)
    assert logger.close(timeout=180)

    client, run_id = tracker(logger.run_dir)
    assert history(client, run_id, "reward") == [(i, float(i)) for i in range(loop.written)]
    assert history(client, run_id, "loss") == [(i, -float(i)) for i in range(loop.written)]
    report = json.loads((logger.run_dir / "report.json").read_text())
    assert report["counts"]["mlflow.errors"], "the outage went unnoticed"
    p99 = statistics.quantiles(during, n=100)[98]
    growth_mb = (rss_after - rss_before) / 2**20
    with capsys.disabled():
        print(
            f"\noutage: {len(during)} writes, CPU per write p50 {statistics.median(during) * 1e6:.0f} us, "
            f"p99 {p99 * 1e6:.0f} us, max {max(during) * 1e3:.1f} ms; RSS {rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MB"
        )
    assert p99 < 0.001  # a deque append: the training thread does no tracker work, however long the outage
    assert growth_mb < 40  # a backlog held in memory would grow ~1 KB per record (~5 MB in 10 s here), and without bound


@pytest.mark.slow
def test_a_tracker_that_never_comes_back_does_not_hold_close_past_its_timeout(mlflow_server, tmp_path, capfd):
    loop = started(tmp_path, mlflow_server.uri, "gone", 1)
    logger = loop.logger
    mlflow_server.stop()
    try:
        training = sum(loop.run(3))  # the training thread's CPU in 3 s of writes at RATE
        assert logger.close(timeout=5) is False  # returns while the server is still down
    finally:
        mlflow_server.start()
    assert training < 1  # ~1,500 deque appends
    report = json.loads((logger.run_dir / "report.json").read_text())
    assert report["counts"]["mlflow.pending"]
    err = capfd.readouterr().err
    assert f"rltrack sync {logger.run_dir} --to mlflow" in err
    assert len(list(rltrack.read_journal(logger.run_dir))) == loop.written
