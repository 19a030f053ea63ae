"""Ray Tune's `storage_path` as rltrack's storage, on a two-node Ray cluster (issue 36).

`ray.cluster_utils.Cluster` starts a head and a worker node on this machine
(as tests/frameworks/test_adapter_tune.py does); moto's S3 server
(tests/helpers/s3_server.py) is the object store. One small sweep on S3
(`storage_path="s3://..."`) and one on a shared directory: the driver's
callback runs mirror under Tune's storage, the trials' own loggers (on
whichever node runs them) under their `run.storage`, and `rltrack runs ls
--root <URI>` lists every trial with its hyperparameters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


pytest_plugins = ["s3_server"]

SWEEPS = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import ray
    from ray import tune
    sys.path.insert(0, sys.argv[2])  # tests/helpers
    from ray_versions import RunConfig, report
    from waiting import wait_until
    from rltrack.adapters.tune import RLTrackCallback
    from rltrack.agent.files import agent_dir, registrations

    root, inner_storage, tune_storage, shared = Path(sys.argv[1]), sys.argv[3], sys.argv[4], sys.argv[5]

    def trainable(config):
        import rltrack  # the trial's own logger, on whichever node runs the trial
        settings = {"run": {"root": str(root / "inner"), "name": f"trial_{config['x']}", "storage": inner_storage, "close_timeout": 120},
                    "backends": {"use": ["local"], "storage": {"every": 0.5}}}
        with rltrack.make_logger(settings) as logger:
            logger.log_hparams({"x": config["x"]})
            for i in range(20):
                logger.write({"v": config["x"] * 100 + i}, step=i)
                report({"v": config["x"] * 100 + i})

    from ray_start import two_node_cluster

    cluster = two_node_cluster()
    ray.init(address=cluster.address, log_to_driver=False)
    for name, storage_path, xs in (("on_s3", tune_storage, [1, 2, 3, 4]), ("on_shared", shared, [5, 6])):
        callback = RLTrackCallback(run={"root": str(root / "driver"), "close_timeout": 120}, backends={"use": ["local"], "storage": {"every": 0.5}})
        tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 0.5}), param_space={"x": tune.grid_search(xs)},
                           run_config=RunConfig(name=name, storage_path=storage_path, callbacks=[callback], verbose=0))
        assert not tuner.fit().errors
    wait_until(lambda: not registrations(agent_dir(), under=root), 300, "the agent to finish every run", every=0.2)
    ray.shutdown()
    cluster.shutdown()
    """
)


def runs_ls(root: str, cwd: Path) -> list[dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "runs", "ls", "--root", root, "--json", "--columns", "status,x"],
                          capture_output=True, text=True, timeout=600, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return sorted(json.loads(done.stdout), key=lambda row: row["x"])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_two_node_sweep_on_s3_and_on_a_shared_directory_is_one_table_from_storage(tmp_path: Path, s3) -> None:
    pytest.importorskip("ray")
    shared = tmp_path / "shared"
    done = subprocess.run(
        [sys.executable, "-c", SWEEPS, str(tmp_path), str(Path(__file__).parents[1] / "helpers"), s3.uri("inner"), s3.uri("tune"), str(shared)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    driver = {path.name: path for path in (tmp_path / "driver" / "on_s3").iterdir() if path.is_dir()}
    assert len(driver) == 4
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

    from rltrack.adapters.tune import _trial_uri, _tune_storage
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
