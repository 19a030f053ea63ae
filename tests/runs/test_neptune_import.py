"""The Neptune rescue importer, on folders written by the real neptune 1.x client.

One offline run is written with the client in this test (series with and
without steps, a cleared series, parameters and other fields, a deleted
field, strings, an image, files on disk and in memory). A second run's
operations are queued with the client's own `DiskQueue` into an async folder
laid out as older clients did (`async/run__<id>/exec-.../`, files split at a
small size). Both are imported; each journal must hold every value of the
Neptune files at its step and time. Then the imported run is synced into
MLflow's embedded SQLite store and read back with `get_metric_history`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

import rltrack
from rltrack.importers.neptune import find_containers, import_folder

from neptune_offline import BASE, write_offline_run


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    for var in ("NEPTUNE_API_TOKEN", "NEPTUNE_PROJECT", "NEPTUNE_MODE", "NEPTUNE_DATA_DIRECTORY", "RLTRACK_BACKENDS", "RLTRACK_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")  # where the client puts .neptune


def write_async_run(project: Path) -> str:
    """An un-synced async run as an older client left it, queued by the client's own DiskQueue."""
    from neptune.core.components.queue.disk_queue import DiskQueue
    from neptune.internal.operation import AssignString, LogFloats, Operation

    uid = "0d3f5c1e-async-run"
    folder = project / ".neptune" / "async" / f"run__{uid}" / "exec-1700000000.0-2023-11-14_22.13.20.000000"
    folder.mkdir(parents=True)
    queue = DiskQueue(folder, lambda op: op.to_dict(), Operation.from_dict, threading.RLock(), max_file_size=2048)
    queue.put(AssignString(["sys", "name"], "Untitled"))
    for i in range(100):
        queue.put(LogFloats(["collector", "reward_mean"], [LogFloats.ValueType(float(i) * 2, i, BASE + i)]))
    queue.flush()
    queue.close()
    assert len(list(folder.glob("data-*.log"))) > 1  # split over several files, as a long run is
    return uid


def neptune_points(project: Path, op_type: str) -> dict[str, list[tuple[Any, Any, float]]]:
    """path -> [(step, value, ts)] straight from the client's files, for comparison."""
    points: dict[str, list[tuple[Any, Any, float]]] = {}
    for log in sorted(project.rglob("data-*.log"), key=lambda p: (p.parent, int(p.stem.split("-")[1]))):
        for line in log.read_text().splitlines():
            op = json.loads(line)["obj"]
            if op["type"] == op_type:
                points.setdefault("/".join(op["path"]), []).extend((v["step"], v["value"], v["ts"]) for v in op["values"])
    return points


def journal_points(run_dir: Path, kind: str) -> dict[str, list[tuple[int, Any, float]]]:
    points: dict[str, list[tuple[int, Any, float]]] = {}
    for event in rltrack.read_journal(run_dir):
        if event.kind == kind:
            assert event.source == "neptune"
            for key, value in event.data.items():
                points.setdefault(event.tag(key), []).append((event.steps["step"], value, event.time))
    return points


@pytest.fixture
def imported(tmp_path):
    project = Path.cwd()
    write_offline_run(tmp_path)
    async_id = write_async_run(project)
    run_dirs = import_folder(project / ".neptune", tmp_path / "runs")
    return project, async_id, {json.loads((d / "meta.json").read_text())["info"]["neptune"]["container_id"]: d for d in run_dirs}


def test_every_series_value_is_in_the_journal_at_its_step_and_time(imported):
    project, async_id, runs = imported
    assert len(runs) == 2
    expected = neptune_points(project, "LogFloats")
    expected["scratch"] = expected["scratch"][1:]  # cleared in Neptune, then logged again
    for path in ("unstepped",):  # Neptune numbered these itself
        expected[path] = [(i, v, t) for i, (_, v, t) in enumerate(expected[path])]
    got: dict[str, list[tuple[int, Any, float]]] = {}
    for run_dir in runs.values():
        got.update(journal_points(run_dir, "scalars"))
    assert got == {path: [(int(s), v, t) for s, v, t in points] for path, points in expected.items()}
    assert len(got["train/loss"]) == 300 and len(got["collector/reward_mean"]) == 100
    assert journal_points(runs[next(k for k in runs if k != async_id)], "text") == {"notes": [(1, "first note", BASE + 3)]}


def test_fields_files_and_run_info(imported):
    _, async_id, runs = imported
    run_dir = runs[next(k for k in runs if k != async_id)]
    assert run_dir.name == "rescued"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["info"]["neptune"]["mode"] == "offline"
    assert meta["info"]["neptune"]["fields"]["sys/tags"] == ["cartpole", "ppo"]
    (hparams,) = [e.data for e in rltrack.read_journal(run_dir) if e.kind == "hparams"]
    assert hparams == {"lr": 0.01, "net": {"layers": 3, "act": "relu"}, "use_gae": True, "config": {"env": "CartPole-v1"}}
    total = (run_dir / "total_config.py").read_text()
    assert "'use_gae': True" in total and "remove_me" not in total

    (image,) = [e for e in rltrack.read_journal(run_dir) if e.kind == "image"]
    assert image.steps == {"step": 3} and (run_dir / image.data["frames"]).read_bytes()[:4] == b"\x89PNG"
    artifacts = {e.data["path"]: e.data for e in rltrack.read_journal(run_dir) if e.kind == "artifact"}
    assert artifacts["files/checkpoints/iteration_5.bin"]["iteration"] == 5
    assert (run_dir / "files/checkpoints/iteration_5.bin").read_bytes() == b"checkpoint bytes"
    assert (run_dir / "files/report.txt").read_bytes() == b"in memory"

    report = json.loads((run_dir / "report.json").read_text())["counts"]["neptune-import.dropped"]
    assert report == {"values cleared or deleted later in Neptune": 1, "UploadFileSet operations (not imported)": 1}

    async_dir = runs[async_id]
    assert async_dir.name == f"neptune_{async_id[:8]}"
    assert json.loads((async_dir / "meta.json").read_text())["info"]["neptune"]["mode"] == "async"


def test_importing_again_creates_nothing_and_containers_are_found_from_any_level(imported, tmp_path):
    project, async_id, runs = imported
    assert import_folder(project, tmp_path / "runs") == []
    assert {c.id for c in find_containers(project)} == set(runs)
    (offline,) = (project / ".neptune" / "offline").iterdir()
    assert [c.folders for c in find_containers(offline)] == [[offline]]
    with pytest.raises(ValueError, match="no Neptune operation files"):
        import_folder(tmp_path / "runs", tmp_path / "other")


def test_an_imported_run_syncs_into_mlflow_with_every_value(imported, tmp_path):
    pytest.importorskip("rltrack.trackers.mlflow.backend", reason="the MLflow backend is not in this checkout yet")
    from mlflow import MlflowClient

    from rltrack.cli.sync_command import sync

    project, async_id, runs = imported
    run_dir = runs[next(k for k in runs if k != async_id)]
    database = tmp_path / "mlflow.db"
    config = tmp_path / "sync.toml"
    config.write_text(f'[backends.mlflow]\ntracking_uri = "sqlite:///{database}"\nexperiment = "rescue"\n')
    assert sync(run_dir, ["mlflow"], config)

    client = MlflowClient(f"sqlite:///{database}")
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("rescue").experiment_id])
    assert mlflow_run.info.status == "FINISHED"
    assert mlflow_run.data.params["lr"] == "0.01" and mlflow_run.data.params["net/act"] == "relu"
    for tag, points in journal_points(run_dir, "scalars").items():
        history = sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(mlflow_run.info.run_id, tag))
        assert history == sorted((s, v, int(t * 1000)) for s, v, t in points), tag


def test_a_run_with_the_clients_monitoring_keeps_it_out_of_the_hyperparameters(tmp_path):
    """The client's defaults: it records each process's hostname, pid and tid
    under `monitoring/<hash>/`, and clears every monitoring series as the run
    starts. Those are facts about the run (meta.json), not hyperparameters,
    and nothing the user logged was cleared."""
    import neptune

    run = neptune.init_run(mode="offline", name="monitored", capture_stdout=True, capture_stderr=True, capture_hardware_metrics=True, source_files=[], git_ref=False)
    run["parameters/lr"] = 0.01
    for i in range(3):
        run["train/loss"].append(1.0 / (i + 1), step=i)
    print("printed by training")
    run.stop()
    [run_dir] = import_folder(Path(".neptune"), tmp_path / "runs")
    [hparams] = [e.data for e in rltrack.read_journal(run_dir) if e.kind == "hparams"]
    assert hparams == {"lr": 0.01}
    fields = json.loads((run_dir / "meta.json").read_text())["info"]["neptune"]["fields"]
    monitoring = {key.rsplit("/", 1)[1]: value for key, value in fields.items() if key.startswith("monitoring/")}
    assert set(monitoring) == {"hostname", "pid", "tid"} and monitoring["pid"].isdigit()
    counts = json.loads((run_dir / "report.json").read_text())["counts"].get("neptune-import.dropped", {})
    assert not any("cleared" in reason for reason in counts), counts
    stdout = [e.data for e in rltrack.read_journal(run_dir) if e.kind == "text" and e.namespace == "monitoring"]
    assert any("printed by training" in str(data) for data in stdout)
