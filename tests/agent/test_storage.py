"""The agent mirrors runs to storage (`run.storage`), against moto's S3 server.

What a test reads back is the bucket itself (boto3) and the run directories
`rltrack pull` rebuilds from it, compared byte for byte with the local run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rltrack
from rltrack.journal.layout import chain, parse_segment
from rltrack.training.config import ConfigError
from growing_files import whole_lines
from waiting import wait_until

pytest_plugins = ["s3_server"]


def rltrack_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rltrack.cli", *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def config(root: Path, name: str, storage: str, every: float = 0.2, **run: object) -> dict[str, object]:
    return {
        "run": {"root": str(root), "name": name, "storage": storage, "close_timeout": 300, **run},
        "backends": {"use": ["local"], "storage": {"every": every}},
    }


def segments(keys: dict[str, int], run: str) -> list[tuple[str | None, int, int]]:
    """The journal segments stored for `run` (the key prefix), as (writer, first, last)."""
    found = [parse_segment(key[len(run) + 1 :]) for key in keys if key.startswith(run + "/")]
    return sorted((s.writer, s.first, s.last) for s in found if s is not None)


def test_a_run_is_mirrored_to_storage_and_pulled_back_whole(tmp_path: Path, s3) -> None:
    """Segments that join into the journal byte for byte, each once; the
    run's files (config, checkpoint, the local layout) as they are; `pull`
    rebuilds the directory and `runs ls --root <URI>` lists the run."""
    root = tmp_path / "runs"
    with rltrack.make_logger(config(root, "mirrored", s3.uri("exp"))) as logger:
        logger.log_hparams({"lr": 0.01, "env_id": "CartPole-v1"})
        for i in range(300):
            logger.write({"loss": float(i)}, step=i, namespace="learner")
            if i % 100 == 0:
                logger.dump(step=i)
        logger.log_checkpoint({"weights": [1, 2, 3]}, iteration=3)
    assert logger.close() is True
    run_dir = logger.run_dir
    keys = s3.keys("exp/")
    stored = segments(keys, "exp/mirrored")
    pieces = [segment for key in keys if (segment := parse_segment(key[len("exp/mirrored/"):])) is not None]
    assert sorted(chain(pieces)) == sorted(pieces)  # one chain from offset 0: no second copy of any range (how many segments depends on when the agent reads)
    journal = (run_dir / "journal.jsonl").read_bytes()
    assert stored[-1][2] == len(journal)
    joined = b"".join(s3.read(f"exp/mirrored/journal/{first:016d}-{last:016d}.jsonl") for _, first, last in stored)
    assert joined == journal  # control lines (dump, counts, end) included
    for name in ("meta.json", "total_config.py", "progress.csv", "ckpt/iteration_3.pth.tar"):
        assert f"exp/mirrored/{name}" in keys, sorted(keys)
    assert not any("/cursors/" in key or key.endswith(".lock") or key.endswith("journal.jsonl") for key in keys)

    pulled = rltrack_cli("pull", s3.uri("exp"), str(tmp_path / "copy"))
    assert pulled.returncode == 0, pulled.stderr
    copy = tmp_path / "copy" / "mirrored"
    assert (copy / "journal.jsonl").read_bytes() == journal
    assert (copy / "ckpt" / "iteration_3.pth.tar").read_bytes() == (run_dir / "ckpt" / "iteration_3.pth.tar").read_bytes()
    assert json.loads((copy / "meta.json").read_text())["status"] == "finished"
    listed = rltrack_cli("runs", "ls", "--root", s3.uri("exp"), "--json", "--columns", "status,lr,env_id")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["status"], row["lr"], row["env_id"]) == ("finished", 0.01, "CartPole-v1")
    assert not (Path.cwd() / "s3:").exists()
    for key in keys:  # gone from storage: gone from the listing (the cached copy follows storage)
        s3.client().delete_object(Bucket="rltrack-test", Key=key)
    listed = rltrack_cli("runs", "ls", "--root", s3.uri("exp"), "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr


def test_a_uri_where_a_local_directory_is_expected_is_refused_in_one_sentence(tmp_path: Path) -> None:
    """`run.root = "s3://..."`, `--root s3://...` of a command that writes: refused, no local `s3:` folder."""
    with pytest.raises(ConfigError, match=r"run.root = 's3://bucket/exp' is a storage URI, not a local directory: .*storage = 's3://bucket/exp'"):
        rltrack.make_logger({"run": {"root": "s3://bucket/exp", "name": "r"}})
    for args in (["runs", "rm", "x", "--root", "s3://bucket/exp"], ["pull", "s3://bucket/exp", "s3://other/dir"], ["import", "neptune", "x", "--root", "s3://b/p"]):
        done = rltrack_cli(*args, cwd=tmp_path)
        assert done.returncode == 2 and "is a storage URI, not a local directory" in done.stderr and "Traceback" not in done.stderr, done.stderr
    with pytest.raises(ConfigError, match="run.storage = 'relative/dir' must be a storage URI or an absolute path"):
        rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "storage": "relative/dir"}})
    assert sorted(os.listdir(tmp_path)) == []


def stored_journal(s3, run: str, writer: str | None = None) -> bytes:
    """The journal joined from the segments stored under `run`, asserting that they form one chain (no range stored twice)."""
    folder = f"{run}/journal/" if writer is None else f"{run}/journal/{writer}/"
    pieces = [segment for key in s3.keys(folder) if (segment := parse_segment(key[len(run) + 1 :])) is not None and segment.writer == writer]
    assert sorted(chain(pieces)) == sorted(pieces), sorted(pieces)
    return b"".join(s3.read(f"{run}/{segment.path}") for segment in chain(pieces))


@pytest.mark.slow
def test_storage_down_for_a_while_delays_only_the_mirror_and_every_segment_arrives_once(tmp_path: Path, s3) -> None:
    """The S3 server stopped mid-run: the local files keep up, the mirror
    fails (told in `rltrack status`), and once the server is back every line
    arrives, in segments that are never stored twice."""
    from reliability_helpers import failing_since

    logger = rltrack.make_logger(config(tmp_path / "runs", "outage", s3.uri("exp")))
    for i in range(100):
        logger.write({"loss": float(i)}, step=i)
        if i % 10 == 9:
            logger.dump(step=i)
    wait_until(lambda: s3.keys("exp/outage/journal/"), 120, "a first segment in storage")
    s3.stop()
    try:
        for i in range(100, 200):
            logger.write({"loss": float(i)}, step=i)
            if i % 10 == 9:
                logger.dump(step=i)
        wait_until(lambda: failing_since(logger.run_dir, "storage") is not None, 120, "the mirror to fail while storage is down")
        progress = logger.run_dir / "progress.csv"
        wait_until(lambda: "199" in (whole_lines(progress) or [""])[-1], 120, "the local files to keep up meanwhile")
    finally:
        s3.start()
    assert logger.close() is True
    assert stored_journal(s3, "exp/outage") == (logger.run_dir / "journal.jsonl").read_bytes()


def test_storage_refusing_writes_delays_only_the_mirror(tmp_path: Path) -> None:
    """A shared directory (`file://`) whose run folder is taken by a file:
    every write fails until it is removed; then the run arrives whole."""
    store = tmp_path / "shared"
    store.mkdir()
    (store / "refused").write_text("in the way")
    logger = rltrack.make_logger(config(tmp_path / "runs", "refused", f"file://{store}"))
    for i in range(50):
        logger.write({"loss": float(i)}, step=i)
    report = logger.run_dir / "cursors"
    wait_until(lambda: any(state.get("trackers", {}).get("storage", {}).get("last_error") for state in _states(logger)), 120, "the mirror to be refused")
    (store / "refused").unlink()
    assert logger.close() is True
    stored = sorted((store / "refused" / "journal").iterdir())
    assert b"".join(path.read_bytes() for path in stored) == (logger.run_dir / "journal.jsonl").read_bytes()
    assert (store / "refused" / "meta.json").is_file() and report.is_dir()


def _states(logger) -> list[dict]:
    from rltrack.agent.files import agent_dir, read_json

    return [run for run in (read_json(agent_dir() / "status.json") or {}).get("runs", []) if run["run_dir"] == str(logger.run_dir.resolve())]


CRASHING_NODE = """
import os, signal, sys
import rltrack
logger = rltrack.make_logger({"run": {"root": sys.argv[1], "name": "killed", "storage": sys.argv[2]},
                              "backends": {"use": ["local"], "storage": {"every": 3600}}})
logger.log_hparams({"seed": 7})
for i in range(500):
    logger.write({"loss": float(i)}, step=i)
assert logger.flush(timeout=120)  # the journal and the local files: not the mirror
print("RUN_DIR=" + str(logger.run_dir), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_node_killed_mid_run_leaves_its_journal_in_storage_after_sync(tmp_path: Path, s3) -> None:
    """The training process SIGKILLed while storage is down (its agent gives
    up after 1 s): `rltrack sync` on that machine, once storage is back,
    stores everything its journal held."""
    from reliability_helpers import read_run_dir, run_child, sync_run

    home = tmp_path / "home"
    home.mkdir()
    s3.stop()
    try:
        done = run_child(CRASHING_NODE, str(tmp_path / "runs"), s3.uri("exp"), home=home, RLTRACK_AGENT_RETRY="1")
        assert done.returncode == -9, done.stderr
        run_dir = read_run_dir(done.stdout.splitlines())
        wait_until(lambda: json.loads((run_dir / "meta.json").read_text())["status"] == "crashed", 120, "the agent to see the crash")
        wait_until(lambda: (run_dir / "report.json").is_file() and "storage.pending" in json.loads((run_dir / "report.json").read_text())["counts"],
                   120, "the agent to give the mirror up, its backlog left to rltrack sync")  # fmt: skip
    finally:
        s3.start()
    synced = sync_run(run_dir, home)
    assert synced.returncode == 0, synced.stderr
    journal = (run_dir / "journal.jsonl").read_bytes()
    assert journal.count(b'"loss"') == 500
    assert stored_journal(s3, "exp/killed") == journal
    assert "exp/killed/meta.json" in s3.keys("exp/killed/")


def test_a_bucket_that_does_not_exist_is_a_fix_to_make_not_an_outage_to_wait_out(tmp_path: Path, s3) -> None:
    """Retrying cannot create a bucket: the mirror says what to check (and is tried again only after minutes)."""
    from rltrack.core.report import Report
    from rltrack.delivery.worker import DeliveryWorker
    from rltrack.journal import JournalWriter, journal_path
    from rltrack.sinks.base import RunContext
    from rltrack.sinks.rundir import create_run_dir
    from rltrack.trackers.storage import StorageBackend
    from rltrack.core.events import Event

    run_dir = create_run_dir(tmp_path / "runs", "r")
    writer = JournalWriter(journal_path(run_dir))
    writer.append([Event(1.0, {"loss": 1.0})])
    writer.close()
    backend = StorageBackend("s3://no-such-bucket/exp", "r", segment_bytes=1)
    backend.open(RunContext(run_dir, "r", {}, Report()))
    worker = DeliveryWorker(backend, run_dir)
    worker.step()
    assert worker.fix == "check that s3://no-such-bucket/exp exists and that the agent's credentials may write to it", worker.last_error
    worker.give_up()


def test_the_writers_of_one_run_are_mirrored_each_in_its_own_segments(tmp_path: Path, s3) -> None:
    """Two processes' loggers on one run (`run.worker`): a segment folder per writer, both journals pulled back whole."""
    root = tmp_path / "runs"
    loggers = [rltrack.make_logger(config(root, "shared_run", s3.uri("exp"), worker=name)) for name in ("learner", "actor_1")]
    for i in range(50):
        for logger in loggers:
            logger.write({"loss": float(i)}, step=i)
    assert all(logger.close() for logger in loggers)
    run_dir = loggers[0].run_dir
    for name in ("learner", "actor_1"):
        assert stored_journal(s3, "exp/shared_run", name) == (run_dir / f"journal.{name}.jsonl").read_bytes()
    pulled = rltrack_cli("pull", s3.uri("exp"), str(tmp_path / "copy"))
    assert pulled.returncode == 0, pulled.stderr
    for name in ("learner", "actor_1"):
        assert (tmp_path / "copy" / "shared_run" / f"journal.{name}.jsonl").read_bytes() == (run_dir / f"journal.{name}.jsonl").read_bytes()
