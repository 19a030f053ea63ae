"""The MLflow backend, read back from real MLflow stores.

Every test that delivers runs three times: against a real `mlflow server`
on SQLite and on PostgreSQL, as production servers run (see mlflow_server.py),
and against the embedded default, a SQLite file beside the runs. What arrived is read back with `MlflowClient` (`get_metric_history`,
params, tags, artifacts, status) and compared with what was written.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from mlflow.utils.validation import _validate_metric_name, _validate_param_name

import rltrack
from journal_batch import journal_batch, with_saved_state
from mlflow_server import history, sqlite_store, tracker
from reliability_helpers import failing_since
from rltrack.sinks.base import RunContext
from rltrack.trackers.mlflow.backend import MlflowBackend
from rltrack.trackers.mlflow.batch import mlflow_key
from rltrack.trackers.remote import EventId
from rltrack.delivery.cursor import Cursor
from rltrack.core.events import Event
from rltrack.core.report import Report
from waiting import wait_until

pytest_plugins = ["mlflow_server"]


@dataclass
class Store:
    """Where runs are made and which MLflow settings they use."""

    root: Path
    settings: dict[str, Any]


@pytest.fixture(scope="module")
def embedded_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run root for the module: its mlflow.db is created once (MLflow's
    schema migrations take seconds), here, before any agent delivers to it."""
    root = tmp_path_factory.mktemp("embedded")
    sqlite_store(root / "mlflow.db")
    return root


SERVERS = {"server": "mlflow_server", "postgres": "mlflow_postgres_server"}


@pytest.fixture(params=["server", "postgres", "embedded"])
def store(request: pytest.FixtureRequest, tmp_path: Path, embedded_root: Path) -> Store:
    if request.param in SERVERS:
        return Store(tmp_path, {"tracking_uri": request.getfixturevalue(SERVERS[request.param]).uri})
    return Store(embedded_root, {})


def make(store: Store, name: str, **settings: Any) -> rltrack.Logger:
    return rltrack.make_logger(
        {"run": {"root": str(store.root), "name": name}, "backends": {"use": ["mlflow"], "mlflow": {**store.settings, **settings}}}
    )


def report_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def test_every_value_param_tag_artifact_and_the_status_arrive(store, tmp_path):
    logger = make(store, "full", run_name="full run", tags={"team": "rl"})
    logger.log_hparams({"lr": 3e-4, "net": {"arch": [64, 64], "act": "tanh"}, "notes": "n" * 7000})
    written: dict[str, list[tuple[int, float]]] = {"collector/reward_mean": [], "collector/episode_len": [], "steps/train_iter": [], "learner/total_loss_avg": []}
    for i in range(120):
        env_steps = 1000 * i
        logger.write({"reward_mean": i * 1.5, "episode_len": 200 - i}, step={"env_steps": env_steps, "train_iter": i // 4}, namespace="collector")
        written["collector/reward_mean"].append((env_steps, i * 1.5))
        written["collector/episode_len"].append((env_steps, 200.0 - i))
        written["steps/train_iter"].append((env_steps, float(i // 4)))
        if i % 10 == 0:
            logger.write({"total_loss_avg": 1 / (i + 1)}, step={"train_iter": i}, namespace="learner")
            written["learner/total_loss_avg"].append((i, 1 / (i + 1)))
    logger.write({"nan": math.nan, "inf": math.inf, "none": None}, step=5, namespace="edge")
    logger.log_text("summary", "line one\nline two", step=7, namespace="evaluator")
    logger.log_checkpoint(b"weights-1", iteration=1, metric=0.5)
    logger.log_checkpoint(b"weights-2", iteration=2, metric=0.9)
    assert logger.close(timeout=120)

    client, run_id = tracker(logger.run_dir)
    for key, points in written.items():
        assert history(client, run_id, key) == points, key
    [(_, nan)] = history(client, run_id, "edge/nan")
    assert math.isnan(nan)
    assert history(client, run_id, "edge/inf") == [(5, 1.7976931348623157e308)]  # SQL stores hold no infinity
    assert history(client, run_id, "edge/none") == []

    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "full run"
    assert run.data.params["lr"] == "0.0003"
    assert run.data.params["net/arch"] == "[64, 64]"
    assert run.data.params["net/act"] == "tanh"
    assert run.data.params["notes"] == "n" * 6000
    assert run.data.tags["team"] == "rl"
    assert run.data.tags["rltrack.best_checkpoint"] == "ckpt/iteration_2.pth.tar"
    assert run.data.tags["rltrack.run_dir"] == str(logger.run_dir.resolve())

    downloads = tmp_path / "downloads"
    downloads.mkdir()  # MLflow 2.22 downloads only into a folder that exists
    for iteration in (1, 2):
        local = client.download_artifacts(run_id, f"ckpt/iteration_{iteration}.pth.tar", str(downloads))
        assert Path(local).read_bytes() == (logger.run_dir / "ckpt" / f"iteration_{iteration}.pth.tar").read_bytes()
    [text_file] = client.list_artifacts(run_id, "text/evaluator/summary")
    text = Path(client.download_artifacts(run_id, text_file.path, str(downloads))).read_text()
    assert "--- step 7" in text and "line one\nline two" in text

    counts = report_of(logger.run_dir)["counts"]
    assert counts["mlflow.delivered"]["scalars events"] == 120 + 12 + 1
    assert counts["mlflow.delivered"]["metric values"] == 2 * 120 + 12 + 2
    assert counts["mlflow.delivered"]["artifact events"] == 2
    assert counts["mlflow.dropped"] == {"None value (no number to log)": 1}
    assert counts["mlflow.converted"] == {"±inf stored by MLflow as ±1.8e308": 1, "param value over 6000 characters truncated": 1}


AWKWARD = ["time:fps", "success@10", "loss(pi)", "ratio%", "k" * 300]


def test_keys_mlflow_refuses_arrive_under_their_mapped_names(store):
    logger = make(store, "keys")
    for i in range(5):
        logger.write({key: float(i + j) for j, key in enumerate(AWKWARD)}, step=i)
    assert logger.close(timeout=120)
    renamed = report_of(logger.run_dir)["renamed"]["mlflow"]
    assert set(renamed) == set(AWKWARD) - {"time:fps"}  # a colon is allowed
    client, run_id = tracker(logger.run_dir)
    for j, key in enumerate(AWKWARD):
        name = renamed.get(key, key)
        assert name == mlflow_key(key) and len(name) <= 250
        assert history(client, run_id, name) == [(i, float(i + j)) for i in range(5)], key


@given(st.text(min_size=1, max_size=400))
def test_mapped_keys_pass_mlflows_own_checks(key):
    name = mlflow_key(key)
    _validate_metric_name(name)  # MLflow's validators are the oracle
    _validate_param_name(name)
    assert len(name) <= 250
    assert mlflow_key(key) == name  # a pure function: the same in every process and replay


@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=300))
def test_different_keys_never_share_a_name(a, b):
    assume(a != b)
    assert mlflow_key(a) != mlflow_key(b)


@pytest.mark.parametrize("error, status", [(RuntimeError, "FAILED"), (KeyboardInterrupt, "KILLED")])
def test_the_run_ends_with_the_loggers_status(embedded_root, error, status):
    with pytest.raises(error):
        with make(Store(embedded_root, {}), f"ended_{status}") as logger:
            logger.write({"x": 1.0}, step=0)
            raise error()
    client, run_id = tracker(logger.run_dir)
    assert client.get_run(run_id).info.status == status


def test_a_second_delivery_continues_the_same_run_and_doubles_nothing(embedded_root):
    """As after a crash between a delivery and its cursor: the whole journal
    is delivered again by a new backend, then a changed hyperparameter."""
    logger = make(Store(embedded_root, {}), "again")
    logger.log_hparams({"lr": 0.1})
    for i in range(50):
        logger.write({"reward": float(i)}, step={"env_steps": 10 * i, "epoch": i // 10})
    assert logger.close(timeout=120)
    client, run_id = tracker(logger.run_dir)
    before = {key: history(client, run_id, key) for key in ("reward", "steps/epoch")}

    again = MlflowBackend()
    report = Report()
    again.open(RunContext(logger.run_dir, logger.name, logger.config, report))
    with_saved_state(again, logger.run_dir).deliver(*journal_batch(logger.run_dir))
    again.deliver([Event(time.time(), {"lr": 0.2}, kind="hparams", steps={"env_steps": 500})], [EventId(None, 10**9)])
    again.close("finished")

    assert tracker(logger.run_dir)[1] == run_id
    assert {key: history(client, run_id, key) for key in before} == before
    assert len(before["reward"]) == 50
    run = client.get_run(run_id)
    assert run.data.params["lr"] == "0.1"
    assert run.data.tags["changed_param/lr"] == "0.2"
    assert report.total("converted", section="mlflow") == 1


def test_the_cursor_waits_for_the_stores_shared_transaction(tmp_path, monkeypatch):
    """The bulk writer stores the metrics of every run together, once due:
    until then a killed agent would lose what it staged, so each run's cursor
    stays before them, and moves over them once stored; the end of the
    journal stores them at once."""
    from rltrack.trackers.mlflow import sqlite as mlflow_sqlite
    from rltrack.delivery.worker import DeliveryWorker

    monkeypatch.setattr(mlflow_sqlite, "COMMIT_EVERY", 3600.0)
    workers, journals = [], []
    for name in ("a", "b"):
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "meta.json").write_text("{}")
        journals.append(run_dir / "journal.jsonl")
        journals[-1].write_text("".join(Event(1.0 + i, {"x": float(i)}, steps={"step": i}).to_json() + "\n" for i in range(5)))
        backend = MlflowBackend(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
        backend.open(RunContext(run_dir, name, {}, Report()))
        workers.append(DeliveryWorker(backend, run_dir, close_at_end=False))
    for worker in workers:
        assert worker.step()
    (client, _), run_ids = tracker(tmp_path / "a"), [tracker(tmp_path / name)[1] for name in ("a", "b")]
    assert [w.cursor.offset for w in workers] == [0, 0]
    assert [client.get_metric_history(run_id, "x") for run_id in run_ids] == [[], []]

    monkeypatch.setattr(mlflow_sqlite, "COMMIT_EVERY", 0.0)
    assert not workers[0].step()  # nothing more to read: the staged rows of both runs are due and stored
    assert [len(client.get_metric_history(run_id, "x")) for run_id in run_ids] == [5, 5]
    assert workers[0].cursor.offset == journals[0].stat().st_size
    workers[1].step()
    assert workers[1].cursor.offset == journals[1].stat().st_size

    monkeypatch.setattr(mlflow_sqlite, "COMMIT_EVERY", 3600.0)
    with journals[0].open("a") as f:
        f.write(Event(9.0, {"x": 9.0}, steps={"step": 9}).to_json() + "\n")
    assert workers[0].step()
    workers[0].journal_complete = True
    workers[0].step()  # the end of the journal: stored now
    assert [m.value for m in client.get_metric_history(run_ids[0], "x")][-1] == 9.0
    assert workers[0].cursor.offset == journals[0].stat().st_size and workers[0].done
    for worker in workers:
        worker.give_up()
        worker.backend.close("finished")


def test_batches_are_split_to_mlflows_request_limits(mlflow_server, tmp_path):
    """The server refuses requests over 1 MB, 100 params or 1000 metrics."""
    logger = make(Store(tmp_path, {"tracking_uri": mlflow_server.uri}), "limits")
    logger.log_hparams({f"p{i:03d}": f"{i}" + "v" * 5000 for i in range(250)})
    logger.write({f"m{i:04d}": float(i) for i in range(2500)}, step=3)
    assert logger.close(timeout=120)
    client, run_id = tracker(logger.run_dir)
    data = client.get_run(run_id).data
    assert data.params == {f"p{i:03d}": f"{i}" + "v" * 5000 for i in range(250)}
    assert data.metrics == {f"m{i:04d}": float(i) for i in range(2500)}


def test_bad_settings_are_config_errors(embedded_root):
    with pytest.raises(rltrack.ConfigError, match=r"backends\.mlflow.*tags"):
        make(Store(embedded_root, {}), "bad", tags="team=rl")


@pytest.mark.slow
@pytest.mark.parametrize("server", SERVERS.values())
def test_an_outage_loses_and_doubles_nothing_and_never_slows_write(server, request, tmp_path, monkeypatch):
    mlflow_server = request.getfixturevalue(server)
    # MLflow's client retries a refused request itself (7 times, backing off), which can carry
    # a batch through the whole outage unseen; with none, rltrack's own retry is what is tested
    # (a process with another MLFLOW_* environment gets an agent of its own, started with it)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    logger = make(Store(tmp_path, {"tracking_uri": mlflow_server.uri}), "outage")
    durations: list[float] = []
    written = 0

    def write(n: int, pause: float) -> None:
        nonlocal written
        for _ in range(n):
            start = time.thread_time()  # the training thread's CPU: a busy machine does not inflate it
            logger.write({"reward": float(written), "loss": -float(written)}, step=written)
            durations.append(time.thread_time() - start)
            written += 1
            time.sleep(pause)

    write(200, 0.002)
    wait_until(lambda: Cursor(logger.run_dir, "mlflow").delivered > 0, 60, "the first records to reach the server before the outage")

    outage_over = threading.Event()

    def write_until_the_outage_is_over() -> None:
        while not outage_over.is_set():
            write(1, 0.02)

    writer = threading.Thread(target=write_until_the_outage_is_over)
    writer.start()
    try:
        mlflow_server.stop()
        wait_until(lambda: failing_since(logger.run_dir, "mlflow") is not None, 120, "the agent to fail at reaching the stopped server")
    finally:
        mlflow_server.start()
        outage_over.set()
        writer.join()
    write(100, 0.002)
    assert logger.close(timeout=180)

    assert report_of(logger.run_dir)["counts"]["mlflow.errors"], "the outage was not noticed"
    client, run_id = tracker(logger.run_dir)
    assert history(client, run_id, "reward") == [(i, float(i)) for i in range(written)]
    assert history(client, run_id, "loss") == [(i, -float(i)) for i in range(written)]
    assert max(durations) < 0.010, f"the costliest write took {max(durations) * 1000:.1f} ms of CPU, of {len(durations)}"


@pytest.mark.parametrize("bulk_sqlite", [True, False])
def test_identical_values_at_one_step_in_one_millisecond_are_all_kept(store, bulk_sqlite):
    """Four vector envs ending equal-length episodes: `ep_len = 200.0` four
    times a step. MLflow keeps one row per (key, timestamp, step, value), and
    had 100 of 400 values while report.json said 400 delivered."""
    logger = make(store, "repeats", **({} if "tracking_uri" in store.settings else {"bulk_sqlite": bulk_sqlite}))
    now = time.time()
    for step in range(100):
        for _env in range(4):
            logger.emit(Event(now + step / 1000, {"ep_len": 200.0}, "scalars", "collector", {"env_steps": step}))
    assert logger.close(timeout=120)
    client, run_id = tracker(logger.run_dir)
    held = history(client, run_id, "collector/ep_len")
    assert held == [(step, 200.0) for step in range(100) for _ in range(4)]
    assert report_of(logger.run_dir)["counts"]["mlflow.delivered"]["metric values"] == 400


@pytest.mark.slow
def test_many_runs_at_once_reach_the_postgresql_server_each_value_once(mlflow_postgres_server, tmp_path):
    """A sweep's trials deliver at once, each its own MLflow run of one
    experiment, through the agent's one MLflow lane into PostgreSQL."""
    loggers = [make(Store(tmp_path, {"tracking_uri": mlflow_postgres_server.uri, "experiment": "sweep"}), f"trial_{i}") for i in range(16)]
    for step in range(200):
        for i, logger in enumerate(loggers):
            logger.write({"reward": step + i / 100, "loss": -step - i / 100}, step={"env_steps": step}, namespace="collector")
    assert all(logger.close(timeout=None) for logger in loggers)
    run_ids = set()
    for i, logger in enumerate(loggers):
        client, run_id = tracker(logger.run_dir)
        run_ids.add(run_id)
        assert history(client, run_id, "collector/reward") == [(step, step + i / 100) for step in range(200)]
        assert history(client, run_id, "collector/loss") == [(step, -step - i / 100) for step in range(200)]
    experiment = client.get_experiment_by_name("sweep")
    assert {run.info.run_id for run in client.search_runs([experiment.experiment_id])} == run_ids
