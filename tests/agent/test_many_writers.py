"""Several processes, and several Ray actors, writing one run at once.

Each writer (config `run.worker`) appends to a journal and text logs of its
own inside the shared run directory, as DI-engine's parallel mode keeps a log
per worker. The tests check that no line is torn or interleaved (every line of
every file parses), that every record is present exactly once, that
`read_journal(run_dir)` merges the streams in time order, and that `rltrack
sync` sends all writers' records into one MLflow run of a real SQLite store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import rltrack
from rltrack.journal import journal_files
from rltrack.cli.sync_command import sync

RECORDS = 3000
WRITERS = ["learner", "actor_0", "actor_1", "actor_2"]

WRITER = textwrap.dedent(
    """
    import sys
    import rltrack

    root, worker, records = sys.argv[1], sys.argv[2], int(sys.argv[3])
    WRITERS = sys.argv[4].split(",")
    config = {"run": {"root": root, "name": "impala", "worker": worker}, "backends": {"use": ["local"]}}
    with rltrack.make_logger(config) as log:
        namespace = "learner" if worker == "learner" else "collector"
        for seq in range(records):
            log.write({"seq": seq, "payload": WRITERS.index(worker) * 1e6 + seq}, step={"step": seq}, namespace=namespace)
            if seq % 500 == 499:
                log.dump()
    """
)


def check_run(run_dir: Path, writers: list[str], records: int) -> None:
    """Every writer's journal parses line by line and holds its records once;
    the merged stream holds all of them, in time order."""
    files = journal_files(run_dir)
    assert sorted(files) == sorted(writers)
    for writer, path in files.items():
        lines = [line for line in path.read_text().splitlines() if '"control"' not in line]  # not the dump lines
        assert len(lines) == records, writer
        parsed = [json.loads(line) for line in lines]  # a torn or interleaved line would not parse
        assert [p["data"]["seq"] for p in parsed] == list(range(records))
        assert {p["worker"] for p in parsed} == {writer}
    merged = list(rltrack.read_journal(run_dir))
    assert Counter((e.worker, e.data["seq"]) for e in merged) == Counter((w, s) for w in writers for s in range(records))
    assert all(a.time <= b.time for a, b in zip(merged, merged[1:]))


def test_processes_write_one_run_each_in_files_of_their_own(tmp_path):
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), worker, str(RECORDS), ",".join(WRITERS)], stderr=subprocess.PIPE, text=True)
        for worker in WRITERS
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    run_dir = tmp_path / "impala"
    check_run(run_dir, WRITERS, RECORDS)
    for worker in WRITERS:
        namespace = "learner" if worker == "learner" else "collector"
        text = (run_dir / "log" / namespace / f"{namespace}_{worker}_logger.txt").read_text()
        assert f"step={RECORDS - 1}" in text  # the last table of that writer is in its own log
        status = json.loads((run_dir / "workers" / f"{worker}.json").read_text())
        assert status["status"] == "finished" and status["worker"] == worker
        assert (run_dir / f"progress_{worker}.csv").read_text().count("\n") >= RECORDS // 500
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["worker"] in WRITERS and meta["status"] == "finished"  # written by the writer that created the run

    # the trackers get one run holding every writer's records
    assert sync(run_dir, to=["mlflow"], config_file=None) is True
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(client.get_metric_history(run.info.run_id, "learner/seq")) == RECORDS
    # the actors' `seq` rows can be identical to the millisecond, which MLflow stores once;
    # `payload` differs per writer, so every actor's record is a row of its own
    payloads = sorted(m.value for m in client.get_metric_history(run.info.run_id, "collector/payload"))
    assert payloads == sorted(WRITERS.index(w) * 1e6 + s for w in WRITERS[1:] for s in range(RECORDS))


THREADED_WRITER = textwrap.dedent(
    """
    import sys, threading
    import rltrack

    root, worker, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    config = {"run": {"root": root, "name": "threads", "worker": worker, "close_timeout": 300}, "backends": {"use": ["local", "mlflow"]}}
    logger = rltrack.make_logger(config)
    start = threading.Barrier(threads)

    def write(thread):
        start.wait()  # every thread writes at once
        for step in range(steps):
            logger.write({f"{worker}_t{thread}": float(step)}, step=step)

    pool = [threading.Thread(target=write, args=(thread,)) for thread in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    print("CLOSED=" + str(logger.close()), flush=True)
    """
)


@pytest.mark.slow
def test_four_processes_of_eight_threads_write_one_run_and_mlflow_holds_every_value_once(tmp_path):
    """4 processes × 8 threads, each thread a key of its own at steps 0-999,
    all into one run: 32,000 values, delivered by the agent into one MLflow
    run in which every key holds each of its 1,000 steps once."""
    processes, threads, steps = 4, 8, 1000
    workers = [f"w{p}" for p in range(processes)]
    started = time.monotonic()
    procs = [
        subprocess.Popen([sys.executable, "-c", THREADED_WRITER, str(tmp_path), worker, str(threads), str(steps)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
        for worker in workers
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and "CLOSED=True" in out, err  # the agent delivered everything within close
    print(f"{processes} processes x {threads} threads, {processes * threads * steps} values: delivered {time.monotonic() - started:.1f} s after the start")
    run_dir = tmp_path / "threads"
    keys = [f"{worker}_t{thread}" for worker in workers for thread in range(threads)]
    journaled = Counter((key, e.steps["step"]) for e in rltrack.read_journal(run_dir) for key in e.data if key in keys)
    assert journaled == Counter((key, step) for key in keys for step in range(steps))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])  # one MLflow run for the 4 writers
    for key in keys:
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted((m.step, m.value) for m in history) == [(step, float(step)) for step in range(steps)], key  # each step once


@pytest.mark.slow
def test_ray_actors_and_the_driver_write_one_run(tmp_path, ray_cluster):
    ray = ray_cluster

    @ray.remote(num_cpus=0)
    class EnvRunner:
        def run(self, root: str, worker: str, records: int) -> str:
            import rltrack

            config = {"run": {"root": root, "name": "rllib_style", "worker": worker}, "backends": {"use": ["local"]}}
            with rltrack.make_logger(config) as log:
                for seq in range(records):
                    log.write({"seq": seq}, step={"step": seq}, namespace="env_runners")
            return str(log.run_dir)

    runners = [EnvRunner.remote() for _ in range(3)]
    pending = [r.run.remote(str(tmp_path), f"env_runner_{i}", 1000) for i, r in enumerate(runners)]
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "rllib_style", "worker": "learner"}}) as log:
        for seq in range(1000):
            log.write({"seq": seq}, step={"step": seq}, namespace="learner")
    dirs = ray.get(pending, timeout=300)
    assert set(dirs) == {str(log.run_dir)}
    check_run(log.run_dir, ["learner", "env_runner_0", "env_runner_1", "env_runner_2"], 1000)
