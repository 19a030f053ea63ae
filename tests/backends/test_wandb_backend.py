"""The W&B backend, with the real wandb client in offline mode, read back from its `.wandb` file.

Every history row W&B wrote is compared with the journal it was delivered
from; rows whose steps go backwards (a resumed run, a second writer) must all
be there. wandb's own directories (config, cache, data, artifacts) point into
a temporary directory for the whole module, so nothing is written elsewhere.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import rltrack
import wandb_reader
from journal_batch import journal_batch, with_saved_state
from reliability_helpers import reported
from deliver import deliver_all
from rltrack.sinks.base import RunContext
from rltrack.core.refusals import NON_FINITE_ENTRY
from rltrack.trackers.wandb.backend import WandbBackend
from rltrack.trackers.wandb.files import HistoryFile, rows_in_files
from rltrack.delivery.cursor import tracker_state
from rltrack.delivery.worker import DeliveryWorker
from rltrack.core.events import Event
from rltrack.journal import JournalWriter
from rltrack.core.report import Report


@pytest.fixture(scope="module", autouse=True)
def wandb_env(tmp_path_factory):
    """wandb-core is started once per process, with the environment of the first init."""
    home = tmp_path_factory.mktemp("wandb_home")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_BASE_URL", "RLTRACK_BACKENDS", "RLTRACK_CONFIG"):
            mp.delenv(var, raising=False)
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        for var, sub in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data"), ("WANDB_ARTIFACT_DIR", "artifacts"), ("HOME", "home")):
            mp.setenv(var, str(home / sub))
        yield home


def make(root: Path, name: str, **settings: Any) -> rltrack.Logger:
    cfg = {"run": {"root": str(root), "name": name}, "backends": {"use": ["wandb"], "wandb": {"project": "rltrack-test", **settings}}}
    return rltrack.make_logger(cfg)


def rows(run_dir: Path) -> list[dict[str, Any]]:
    """History rows of every `.wandb` file of the run, in order, without W&B's own `_` keys."""
    files = wandb_reader.run_files(run_dir)
    assert files, f"no .wandb file under {run_dir}"
    return [{k: v for k, v in row.items() if not k.startswith("_")} for f in files for row in wandb_reader.history(f)]


def expected_scalar_rows(run_dir: Path) -> list[dict[str, Any]]:
    """One row per scalar event: its values by tag, then its step axes (a
    value named like an axis, with another value, renamed `<key>_value`)."""
    expected = []
    for e in rltrack.read_journal(run_dir):
        if e.kind in ("scalars", "timing"):
            row = {f"{e.tag(k)}_value" if e.tag(k) in e.steps and v != e.steps[e.tag(k)] else e.tag(k): v for k, v in e.data.items()}
            expected.append({**row, **e.steps})
    return expected


def same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def write_gif(path: Path) -> None:
    frames = [Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)) for i in range(3)]
    frames[0].save(path, save_all=True, append_images=frames[1:])


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One run with every kind, steps going backwards, a NaN, a colliding key and bad media."""
    logger = make(tmp_path_factory.mktemp("runs"), "everything", tags=["ppo", "test"], group="g1")
    logger.log_hparams({"lr": 3e-4, "net": {"layers": [64, 64], "act": "tanh"}})
    for env_steps in [*range(0, 100, 10), *range(50, 120, 10)]:  # resumed from step 50: lower steps again
        logger.write({"reward_mean": env_steps / 10, "len": env_steps + 1}, step={"env_steps": env_steps, "train_iter": env_steps // 10}, namespace="collector")
    for i in range(5):
        logger.write({"total_loss_avg": 1.0 / (i + 1)}, step={"train_iter": i, "env_steps": 64 * i}, namespace="learner")
    logger.write({"reward_mean": float("nan"), "inf": float("inf")}, step={"env_steps": 7}, namespace="evaluator")
    logger.write({"env_steps": 12345, "plain": 1}, step={"env_steps": 8})  # a key with an axis's name
    logger.write({"env_steps": 9, "same": 2}, step={"env_steps": 9})  # the same value: no rename
    with logger.timer("update", step={"env_steps": 9}):
        pass
    logger.write({"q_values": [0.5, 1.5, 2.5, float("nan")]}, step={"env_steps": 10}, namespace="learner", kind="histogram")
    logger.log_text("summary", "<b>episode</b> & done", step={"env_steps": 11}, namespace="evaluator")
    write_gif(logger.run_dir / "clip.gif")
    Image.fromarray(np.full((4, 6, 3), 200, dtype=np.uint8)).save(logger.run_dir / "frame.png")
    logger.write({"frame": "frame.png", "pixels": np.arange(24, dtype=np.uint8).reshape(4, 6).tolist(), "missing": "nope.png"}, step={"env_steps": 12}, namespace="evaluator", kind="image")
    logger.write({"clip": "clip.gif"}, step={"env_steps": 13}, namespace="evaluator", kind="video")
    (logger.run_dir / "weights.bin").write_bytes(b"weights")  # a path is copied as is (no torch.save)
    logger.log_checkpoint(logger.run_dir / "weights.bin", iteration=3, metric=1.0)
    logger.log_hparams({"lr": 1e-4})
    assert logger.close(timeout=120)
    return logger


def test_every_scalar_row_is_in_the_wandb_file_even_when_steps_go_backwards(full_run):
    got = [row for row in rows(full_run.run_dir) if not any(isinstance(v, dict) or "/_type" in k for k, v in row.items())]
    got = [row for row in got if not any(k.endswith(("/_type", "/path", "/sha256", "/size", "/format", "/width", "/height", "/values", "/bins")) for k in row)]
    expected = expected_scalar_rows(full_run.run_dir)
    assert {"env_steps_value": 12345, "plain": 1, "env_steps": 8} in expected
    assert len(got) == len(expected) == 17 + 5 + 4
    for g, e in zip(got, expected):
        assert g.keys() == e.keys()
        assert all(same(g[k], e[k]) for k in e), (g, e)
    collector = [row["env_steps"] for row in got if "collector/reward_mean" in row]
    assert collector == [*range(0, 100, 10), *range(50, 120, 10)]
    assert full_run.report.as_dict()["renamed"]["wandb"] == {"env_steps": "env_steps_value"}


def test_keys_are_charted_against_the_primary_axis_of_their_event(full_run):
    metrics = {m.name: m.step_metric for m in wandb_reader.of_type(wandb_reader.run_files(full_run.run_dir)[0], "metric")}
    assert metrics["collector/reward_mean"] == "env_steps"
    assert metrics["learner/total_loss_avg"] == "train_iter"
    assert metrics["time/update"] == "env_steps"
    assert "env_steps" not in metrics and "train_iter" not in metrics


def test_media_hparams_checkpoint_and_exit_code(full_run):
    run_file = wandb_reader.run_files(full_run.run_dir)[0]
    files = run_file.parent / "files"
    history = wandb_reader.history(run_file)
    by_key = {k: row for row in history for k in row}

    hist = by_key["learner/q_values/_type"]
    assert hist["learner/q_values/_type"] == "histogram" and sum(hist["learner/q_values/values"]) == 3
    assert hist["env_steps"] == 10

    text = by_key["evaluator/summary/_type"]
    assert text["evaluator/summary/_type"] == "html-file"
    assert "&lt;b&gt;episode&lt;/b&gt; &amp; done" in (files / text["evaluator/summary/path"]).read_text()

    image = by_key["evaluator/frame/_type"]
    assert image["evaluator/frame/_type"] == "image-file" and (image["evaluator/frame/width"], image["evaluator/frame/height"]) == (6, 4)
    assert image["evaluator/pixels/_type"] == "image-file" and image["env_steps"] == 12
    assert "evaluator/missing/_type" not in by_key
    assert (files / by_key["evaluator/clip/_type"]["evaluator/clip/path"]).read_bytes() == (full_run.run_dir / "clip.gif").read_bytes()

    config = wandb_reader.config(run_file)
    assert config["lr"] == 1e-4 and config["net"] == {"layers": [64, 64], "act": "tanh"}

    (artifact,) = wandb_reader.of_type(run_file, "artifact")
    assert artifact.type == "model"
    assert set(artifact.aliases) == {"latest", "iteration_3", "best"}
    checkpoint = full_run.run_dir / "ckpt" / "iteration_3.pth.tar"
    assert [(e.path, e.size) for e in artifact.manifest.contents] == [(checkpoint.name, checkpoint.stat().st_size)]

    (run_record,) = wandb_reader.of_type(run_file, "run")
    assert run_record.display_name == "everything" and list(run_record.tags) == ["ppo", "test"] and run_record.run_group == "g1"
    assert [e.exit_code for e in wandb_reader.of_type(run_file, "exit")] == [0]

    all_counts = json.loads((full_run.run_dir / "report.json").read_text())["counts"]
    assert sum(n for reason, n in all_counts["wandb.refused"].items() if reason.startswith(NON_FINITE_ENTRY)) == 1
    counts = all_counts["wandb.dropped"]
    assert any("evaluator/missing" in reason and "FileNotFoundError" in reason for reason in counts)


def test_nothing_is_written_outside_the_run_directory_and_wandb_dirs(full_run, wandb_env):
    assert not (Path.cwd() / "wandb").exists()
    assert (full_run.run_dir / "wandb").is_dir()
    assert not any(path.is_file() for path in (wandb_env / "home").rglob("*"))  # W&B 0.19 makes an empty ~/.config/wandb


def test_a_second_writer_with_lower_steps_resumes_the_same_run_and_keeps_every_row(tmp_path):
    """Delivery in two goes (as `rltrack sync` after a crash does), the second
    with steps lower than the first: both W&B files share one run id, and
    together they hold every row, in order."""
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "resumed"}, "backends": {"use": ["local"]}})
    for step in range(10):
        logger.write({"x": step}, step={"env_steps": step}, namespace="a")
    logger.close()
    run_dir = logger.run_dir
    context = RunContext(run_dir, logger.name, logger.config, Report())
    for status in ("killed", "failed"):
        backend = WandbBackend(project="rltrack-test")
        backend.open(context)
        deliver_all(DeliveryWorker(backend, run_dir), status)
        if status == "killed":  # a second writer appends lower steps
            journal = JournalWriter(run_dir / "journal.jsonl")
            journal.append(Event(time.time(), {"x": 100 + step}, namespace="a", steps={"env_steps": step}) for step in range(3, 8))
            journal.close()
    files = wandb_reader.run_files(run_dir)
    assert len(files) == 2 and len({f.name for f in files}) == 1  # the same W&B run id, resumed
    assert [(row["env_steps"], row["a/x"]) for row in rows(run_dir)] == [(s, s) for s in range(10)] + [(s, 100 + s) for s in range(3, 8)]
    assert [e.exit_code for f in files for e in wandb_reader.of_type(f, "exit")] == [255, 1]


def test_a_hanging_wandb_server_never_blocks_the_training_thread(tmp_path, monkeypatch):
    """Online mode against a server that accepts connections and never answers.
    `wandb.init` runs in the agent, stuck meanwhile: the training thread's
    CPU time per write shows it does none of the tracker's work."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
        logger = make(tmp_path, "hang", mode="online", init_timeout=1)
        took = []
        for i in range(2000):
            start = time.thread_time()  # the training thread's CPU: a busy machine does not inflate it
            logger.write({"x": i}, step=i)
            took.append(time.thread_time() - start)
            if i % 100 == 0:
                time.sleep(0.001)  # a training step; the agent's delivery is stuck in wandb.init meanwhile
        assert logger.close(timeout=2) is False  # returns while the server has still never answered
    assert max(took) < 0.3 and sorted(took)[len(took) // 2] < 0.001
    reported(logger.run_dir, "wandb.pending")
    assert tracker_state(logger.run_dir, "wandb") == {}  # no run was created, none to resume


def test_a_saved_run_whose_init_failed_waits_for_sync_instead_of_retrying_a_reserved_id(tmp_path, monkeypatch):
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "reserved"}, "backends": {"use": ["local"]}})
    logger.write({"x": 1}, step=1)
    logger.close()
    context = RunContext(logger.run_dir, logger.name, logger.config, Report())
    offline = WandbBackend()
    offline.open(context)
    deliver_all(DeliveryWorker(offline, logger.run_dir), "finished")
    saved = tracker_state(logger.run_dir, "wandb")["id"]
    with socket.socket() as server:  # the same run, now online against a server that never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
        online = WandbBackend(mode="online", init_timeout=1)
        online.open(context)
        with_saved_state(online, logger.run_dir)
        events, ids = journal_batch(logger.run_dir)
        with pytest.raises(Exception) as first:
            online.deliver(events, ids)
        assert not isinstance(first.value, RuntimeError)  # W&B's own error
        inits = []
        monkeypatch.setattr(online._wandb, "init", lambda *args, **kwargs: inits.append(kwargs))
        with pytest.raises(RuntimeError, match=f"W&B run {saved} failed earlier.*rltrack sync {logger.run_dir} --to wandb"):
            online.deliver(events, ids)
        assert inits == []  # not tried again (each try waits init_timeout for the server)


@pytest.fixture(scope="module")
def wandb_file(tmp_path_factory) -> tuple[bytes, int]:
    """A real `.wandb` file of 2,000 rows of 10 scalars, and its row count by W&B's reader."""
    logger = make(tmp_path_factory.mktemp("wandb_file"), "grows")
    for i in range(2000):
        logger.write({f"k{j}": i + j / 10 for j in range(10)}, step=i)
    assert logger.close(timeout=120)
    (source,) = wandb_reader.run_files(logger.run_dir)
    return source.read_bytes(), len(wandb_reader.history(source))


def test_the_wandb_file_is_counted_as_it_grows(tmp_path, wandb_file):
    """How far W&B has stored (`deliver`'s `Progress.stored`) is read from W&B's file while wandb-core appends to it: a
    copy grown in uneven pieces (records and 32 KiB blocks cut anywhere) is
    never counted past what is whole, and ends at what W&B's reader finds."""
    data, total = wandb_file
    assert len(data) > 3 * HistoryFile.BLOCK
    growing = tmp_path / "copy.wandb"
    counter = HistoryFile(growing)
    assert counter.count() == 0  # no file yet
    rng = np.random.default_rng(0)
    end, counts = 0, []
    with growing.open("wb") as f:
        while end < len(data):
            piece = int(rng.integers(1, 5000))
            f.write(data[end : end + piece])
            f.flush()
            end += piece
            counts.append(counter.count())
            assert counts[-1] <= total
    assert counts == sorted(counts) and counts[-1] == total == 2000
    assert len(set(counts)) > 20  # counted along the way, not only at the end


def test_earlier_files_are_counted_once_their_writer_lets_go(tmp_path, wandb_file):
    """After a crash, the dead run's wandb-core goes on appending what it had
    received for a second or two, and `rltrack sync` may start meanwhile:
    counting the earlier file then would log those rows a second time. A
    process stands in for that wandb-core (a real one cannot be held at that
    point): it holds the file open, half written, and writes the rest later."""
    data, total = wandb_file
    source, path = tmp_path / "source.wandb", tmp_path / "run.wandb"
    source.write_bytes(data)
    path.write_bytes(data[: len(data) // 2])
    script = "import sys, time; f = open(sys.argv[1], 'ab'); print('open', flush=True); time.sleep(1.5); f.write(open(sys.argv[2], 'rb').read()[int(sys.argv[3]):]); f.close()"
    writer = subprocess.Popen([sys.executable, "-c", script, str(path), str(source), str(len(data) // 2)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "open\n"
        assert HistoryFile(path).count() < total  # what counting at once would find
        assert rows_in_files([path]) == total
    finally:
        writer.wait(30)
    assert writer.returncode == 0


def test_the_package_list_is_read_once_per_process_and_every_run_gets_it(tmp_path, monkeypatch):
    """wandb reads the metadata of every installed distribution at each run's
    start (the run's requirements.txt); an agent starting a sweep's runs read
    it per run. Now once per process: three runs, one reading, and each run's
    requirements.txt lists the packages."""
    import wandb.util

    readings = []
    original = wandb.util.working_set

    def counted() -> Any:
        readings.append(1)
        return original()

    monkeypatch.setattr(wandb.util, "working_set", counted)
    run_dirs = []
    for name in ("first", "second", "third"):
        logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": name}, "backends": {"use": ["local"]}})
        logger.write({"x": 1.0}, step=1)
        logger.close()
        backend = WandbBackend(project="rltrack-test")
        backend.open(RunContext(logger.run_dir, logger.name, logger.config, Report()))
        deliver_all(DeliveryWorker(backend, logger.run_dir), "finished")
        run_dirs.append(logger.run_dir)
    assert len(readings) == 1
    for run_dir in run_dirs:
        (requirements,) = run_dir.glob("wandb/offline-run-*/files/requirements.txt")
        assert "wandb==" in requirements.read_text() and "numpy==" in requirements.read_text()
