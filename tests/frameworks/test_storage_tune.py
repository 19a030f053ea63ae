"""Ray Tune's `storage_path` as rltrack's storage, on a two-node Ray cluster (issue 36).

The issue's first check in one run. `ray.cluster_utils.Cluster` starts a
head and a worker node on this machine (tests/helpers/ray_start.py); moto's
S3 server (tests/helpers/s3_server.py) is the object store; an `mlflow
server` on a real PostgreSQL (tests/helpers/mlflow_server.py) is the
tracker. One small sweep on S3 (`storage_path="s3://..."`), delivered to
MLflow, with the server stopped and started again mid-sweep, and one on a
shared directory: the driver's callback runs mirror under Tune's storage,
the trials' own loggers (on whichever node runs them) under their
`run.storage`, `rltrack runs ls --root <URI>` lists every trial with its
hyperparameters, and every value is in PostgreSQL once, the outage included.

The outage follows progress, not the clock: the S3 sweep's trials write half
their values and wait for a gate file; the test stops the server once it
holds every first half, opens the gate (the second halves meet the stopped
server), and starts the server again once the agent has failed to reach it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


pytest_plugins = ["s3_server", "mlflow_server"]

VALUES = 20  # per trial; the S3 sweep's trials wait at the gate after half of them
ON_S3 = (1, 2, 3, 4)

SWEEPS = textwrap.dedent(
    """
    import os
    import sys
    import time
    from pathlib import Path
    import ray
    from ray import tune
    sys.path.insert(0, sys.argv[2])  # tests/helpers
    from ray_versions import RunConfig, report
    from waiting import wait_until
    from rltrack.adapters.tune import RLTrackCallback
    from rltrack.agent.files import agent_dir, registrations

    root, inner_storage, tune_storage, shared = Path(sys.argv[1]), sys.argv[3], sys.argv[4], sys.argv[5]
    tracking_uri, experiment, gate, values = sys.argv[6], sys.argv[7], sys.argv[8], int(sys.argv[9])

    def trainable(config):
        import rltrack  # the trial's own logger, on whichever node runs the trial
        settings = {"run": {"root": str(root / "inner"), "name": f"trial_{config['x']}", "storage": inner_storage, "close_timeout": 120},
                    "backends": {"use": ["local"], "storage": {"every": 0.5}}}
        with rltrack.make_logger(settings) as logger:
            logger.log_hparams({"x": config["x"]})
            for i in range(values):
                if i == values // 2 and config["x"] <= 4:  # the S3 sweep: the test's outage comes here
                    waited = time.monotonic()
                    while not os.path.exists(gate):  # the test opens it; bounded, should the test be gone
                        assert time.monotonic() - waited < 900, "the test never opened the gate"
                        time.sleep(0.1)
                logger.write({"v": config["x"] * 100 + i}, step=i)
                report({"v": config["x"] * 100 + i})

    from ray_start import two_node_cluster

    cluster = two_node_cluster()
    ray.init(address=cluster.address, log_to_driver=False)
    mlflow = {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": tracking_uri, "experiment": experiment}, "storage": {"every": 0.5}}
    for name, storage_path, xs, backends in (("on_s3", tune_storage, [1, 2, 3, 4], mlflow),
                                             ("on_shared", shared, [5, 6], {"use": ["local"], "storage": {"every": 0.5}})):
        callback = RLTrackCallback(run={"root": str(root / "driver"), "close_timeout": 300}, backends=backends)
        tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 0.5}), param_space={"x": tune.grid_search(xs)},
                           run_config=RunConfig(name=name, storage_path=storage_path, callbacks=[callback], verbose=0))
        assert not tuner.fit().errors
    wait_until(lambda: not registrations(agent_dir(), under=root), 600, "the agent to finish every run", every=0.2)
    ray.shutdown()
    cluster.shutdown()
    """
)


def runs_ls(root: str, cwd: Path) -> list[dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "runs", "ls", "--root", root, "--json", "--columns", "status,x"],
                          capture_output=True, text=True, timeout=600, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return sorted(json.loads(done.stdout), key=lambda row: row["x"])  # type: ignore[no-any-return]


def held_values(client, experiment: str) -> int:  # type: ignore[no-untyped-def]
    """How many values of `v` the MLflow server holds in `experiment`, over its runs."""
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id]) if found else []
    return sum(len(client.get_metric_history(run.info.run_id, "v")) for run in runs)


@pytest.mark.slow
def test_a_two_node_sweep_on_s3_delivers_to_postgresql_mlflow_through_a_restart_and_is_one_table_from_storage(
    tmp_path: Path, s3, mlflow_postgres_server, monkeypatch
) -> None:
    pytest.importorskip("ray")
    from mlflow import MlflowClient
    from reliability_helpers import failing_since
    from waiting import wait_until

    from rltrack.delivery.cursor import tracker_state

    # MLflow's client retries a refused request itself (7 times, backing off) and could carry a batch
    # through the outage unseen; with none, rltrack's own retry is what is tested (the agent inherits it)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server, experiment, gate = mlflow_postgres_server, f"cluster_{tmp_path.name}", tmp_path / "gate"
    shared, client = tmp_path / "shared", MlflowClient(mlflow_postgres_server.uri)
    args = [str(tmp_path), str(Path(__file__).parents[1] / "helpers"), s3.uri("inner"), s3.uri("tune"), str(shared),
            server.uri, experiment, str(gate), str(VALUES)]  # fmt: skip
    with (tmp_path / "sweep.out").open("w") as out, (tmp_path / "sweep.err").open("w") as err:
        sweep = subprocess.Popen([sys.executable, "-c", SWEEPS, *args], stdout=out, stderr=err, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})

    def sweep_error() -> str:
        return (tmp_path / "sweep.err").read_text()[-3000:]

    def alive() -> None:
        assert sweep.poll() is None, f"the sweep ended before the outage: {sweep_error()}"

    try:
        first_halves = len(ON_S3) * VALUES // 2
        wait_until(lambda: alive() or held_values(client, experiment) >= first_halves, 600,
                   lambda: f"the server to hold every trial's first {VALUES // 2} values (it holds {held_values(client, experiment)})", every=0.5)  # fmt: skip
        driver_runs = [path for path in (tmp_path / "driver" / "on_s3").iterdir() if path.is_dir()]
        server.stop()
        try:
            gate.touch()  # the second halves meet the stopped server
            wait_until(lambda: alive() or any(failing_since(run_dir, "mlflow") is not None for run_dir in driver_runs), 300,
                       "the agent to fail at reaching the stopped server", every=0.2)  # fmt: skip
        finally:
            server.start()
        assert sweep.wait(timeout=900) == 0, sweep_error()
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()

    driver = {path.name: path for path in (tmp_path / "driver" / "on_s3").iterdir() if path.is_dir()}
    assert len(driver) == len(ON_S3)
    errors, trials = 0, []
    for run_dir in driver.values():  # every value in PostgreSQL once, the outage's included
        run_id = tracker_state(run_dir, "mlflow")["run_id"]
        stored = sorted(m.value for m in client.get_metric_history(run_id, "v"))
        x = int(stored[0]) // 100
        assert stored == [float(x * 100 + i) for i in range(VALUES)], run_dir.name
        trials.append(x)
        counts = json.loads((run_dir / "report.json").read_text())["counts"]
        keys = client.get_run(run_id).data.metrics
        held = sum(len(client.get_metric_history(run_id, key)) for key in keys)
        assert counts["mlflow.delivered"]["metric values"] == held and "mlflow.pending" not in counts, (run_dir.name, counts)
        errors += bool(counts.get("mlflow.errors"))
    assert sorted(trials) == list(ON_S3) and errors, f"trials {trials}, {errors} met the outage"
    for run_dir in driver.values():  # Tune's storage, scheme kept
        assert json.loads((run_dir / "meta.json").read_text())["info"]["trial_path"].startswith(s3.uri("tune") + "/on_s3/")
    rows = runs_ls(s3.uri("tune"), tmp_path)  # Tune's own trial folders there are not runs
    assert [(row["x"], row["status"]) for row in rows] == [(x, "finished") for x in (1, 2, 3, 4)]
    for row in rows:  # every trial's run directory, whole: its journal is the driver's, byte for byte
        pulled = Path(str(row["path"]))
        assert pulled.parts[0] == "on_s3" and pulled.name in driver
    pull = subprocess.run([sys.executable, "-m", "rltrack.cli", "pull", s3.uri("tune"), str(tmp_path / "pulled")], capture_output=True, text=True, timeout=600)
    assert pull.returncode == 0, pull.stderr
    for name, run_dir in driver.items():
        assert (tmp_path / "pulled" / "on_s3" / name / "journal.jsonl").read_bytes() == (run_dir / "journal.jsonl").read_bytes()
    inner = runs_ls(s3.uri("inner"), tmp_path)  # the trials' own loggers, from both nodes
    assert [(row["x"], row["status"]) for row in inner] == [(x, "finished") for x in (1, 2, 3, 4, 5, 6)]
    on_shared = runs_ls(f"file://{shared}", tmp_path)
    assert [(row["x"], row["status"]) for row in on_shared] == [(5, "finished"), (6, "finished")]
    assert not (tmp_path / "s3:").exists() and not Path("s3:").exists()


def test_tunes_storage_path_is_the_runs_storage_with_its_scheme_unless_it_is_tunes_default(tmp_path: Path, s3, monkeypatch) -> None:
    """Tune's own `StorageContext` (it opens the store as Tune does); the
    trial around it is a stand-in holding only what the adapter reads."""
    from types import SimpleNamespace

    pytest.importorskip("ray")
    from ray.train._internal.storage import StorageContext

    from rltrack.adapters.tune.callback import _trial_uri, _tune_storage
    from rltrack.core.storage import Storage

    def trial(storage_path: str) -> SimpleNamespace:
        context = StorageContext(storage_path=storage_path, experiment_dir_name="exp", trial_dir_name="t1")
        return SimpleNamespace(storage=context, path=context.trial_fs_path)

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _tune_storage(trial(str(tmp_path / "home" / "ray_results"))) is None  # Tune's default: this machine's only
    shared = trial(str(tmp_path / "shared"))
    assert (_tune_storage(shared), _trial_uri(shared)) == (str(tmp_path / "shared"), str(tmp_path / "shared" / "exp" / "t1"))
    on_s3 = trial(s3.uri("tune"))
    assert (_tune_storage(on_s3), _trial_uri(on_s3)) == (s3.uri("tune"), s3.uri("tune") + "/exp/t1")
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the endpoint named in the URI only: the URI rltrack keeps names it too
    named = trial(f"{s3.uri('named')}?endpoint_override=127.0.0.1:{s3.port}&scheme=http")
    kept = _tune_storage(named)
    assert kept is not None and kept.startswith(s3.uri("named") + "?") and f"endpoint_override=127.0.0.1:{s3.port}" in kept
    Storage(kept).put("probe", b"reachable")
    assert s3.read("named/probe") == b"reachable"
