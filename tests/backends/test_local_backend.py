"""The serial run directory, read back file by file: progress.csv, the config
files, meta.json, git info, the text logs, checkpoints and run naming.
(TensorBoard files: test_tensorboard_backend.py.)"""

from __future__ import annotations

import ast
import hashlib
import io
import ipaddress
import json
import math
import os
import re
import socket
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import rltrack
from stage_reader import read_blocks


def config(tmp_path: Path, name: str = "run", **run: Any) -> dict[str, Any]:
    return {"run": {"root": str(tmp_path / "runs"), "name": name, **run}, "backends": {"use": ["local"]}}


def read_meta(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "meta.json").read_text())


# ---- progress.csv -----------------------------------------------------------


def test_progress_csv_keeps_late_keys_and_complete_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    written: list[dict[str, float]] = []
    with rltrack.make_logger(config(tmp_path)) as logger:
        for i in range(8):
            steps = {"env_steps": 100 * i, "train_iter": i}
            row = {"learner/loss": rng.normal(), "collector/reward_mean": rng.normal()}
            logger.write({"loss": row["learner/loss"]}, step=steps, namespace="learner")
            logger.write({"reward_mean": row["collector/reward_mean"]}, step=steps, namespace="collector")
            if i >= 5:  # evaluation starts late, as it does in real runs
                row["evaluator/reward_mean"] = rng.normal()
                logger.write({"reward_mean": row["evaluator/reward_mean"]}, step=steps, namespace="evaluator")
            logger.dump()
            written.append({**steps, **row})
    df = pd.read_csv(logger.run_dir / "progress.csv")
    assert {"env_steps", "train_iter", "learner/loss", "collector/reward_mean", "evaluator/reward_mean"} <= set(df.columns)
    assert len(df) == len(written)
    for (_, got), want in zip(df.iterrows(), written):
        for key in ("learner/loss", "collector/reward_mean", "evaluator/reward_mean", "env_steps", "train_iter"):
            if key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-12), key
            else:
                assert math.isnan(got[key]), key  # blank before the key first appeared


def test_progress_csv_rows_without_dump_follow_the_step(tmp_path: Path) -> None:
    """A loop that never calls dump still gets one row per step, and a row never
    mixes values from two steps, even when no key repeats."""
    with rltrack.make_logger(config(tmp_path)) as logger:
        logger.write({"loss": 1.0}, step=0, namespace="learner")
        logger.write({"reward": 10.0}, step=0, namespace="collector")
        logger.write({"loss": 2.0}, step=1, namespace="learner")  # key repeats: new row
        logger.write({"eval": 5.0}, step=2, namespace="evaluator")  # new step, new key: new row too
    df = pd.read_csv(logger.run_dir / "progress.csv")
    assert df["step"].tolist() == [0, 1, 2]
    assert df["learner/loss"].tolist()[:2] == [1.0, 2.0] and math.isnan(df["learner/loss"][2])
    assert df["collector/reward"][0] == 10.0 and df["collector/reward"][1:].isna().all()
    assert df["evaluator/eval"].isna().tolist() == [True, True, False]


def test_progress_csv_skips_none_and_keeps_float_precision(tmp_path: Path) -> None:
    value = 0.1 + 0.2  # needs all 17 digits
    with rltrack.make_logger(config(tmp_path)) as logger:
        logger.write({"x": value, "y": None, "big": 2**53 + 1}, step=1)
    df = pd.read_csv(logger.run_dir / "progress.csv", dtype={"big": object}, float_precision="round_trip")  # pandas 2.1's default parser can miss the last digit
    assert df["x"][0] == value
    assert int(df["big"][0]) == 2**53 + 1
    assert "y" not in df.columns or df["y"].isna().all()


def test_progress_csv_rows_are_what_the_csv_module_writes(tmp_path: Path) -> None:
    """Rows of numbers are written without the csv module (orjson writes the
    numbers); on generated rows (ints, floats, nan, inf, None, missing and late
    columns, strings and bools that need the csv module) the file has the
    lines and fields `csv.writer` writes, each number the same float (orjson
    writes 1e-07 as 1e-7), and its rows of numbers reach the fast path."""
    import csv
    import random

    from rltrack.sinks.csvfile import GrowingCsv

    rnd = random.Random(3)
    pool = [None, 0, -7, 2**70, 0.1 + 0.2, -1e-300, 1e300, 1e-07, 1e22, math.nan, math.inf, -math.inf, "a,b", 'q"', "", True]
    rows = []
    for i in range(400):
        keys = rnd.sample(["time", "step", "a/x", "b/y", "c", "late"] if i > 200 else ["time", "step", "a/x", "b/y"], rnd.randint(1, 4))
        rows.append({key: rnd.choice(pool) if rnd.random() < 0.3 else rnd.uniform(-1e6, 1e6) for key in keys})
    rows += [{"time": None}, {}]
    writer = GrowingCsv(tmp_path / "progress.csv")
    for row in rows:
        writer.write_row(row)
    writer.close()
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with (tmp_path / "expected.csv").open("w", newline="", encoding="utf-8") as f:
        expected = csv.writer(f)
        expected.writerow(columns)
        expected.writerows([row.get(c) for c in columns] for row in rows)
    written, expected_text = (tmp_path / "progress.csv").read_bytes(), (tmp_path / "expected.csv").read_bytes()
    assert written.count(b"\r\n") == expected_text.count(b"\r\n")
    assert b"1e-7" in written and b"1e-7" not in expected_text  # orjson wrote rows; csv.writer writes 1e-07
    got, want = (list(csv.reader(io.StringIO(text.decode()))) for text in (written, expected_text))
    assert [len(row) for row in got] == [len(row) for row in want]
    for got_row, want_row in zip(got, want):
        for cell, wanted in zip(got_row, want_row):
            assert cell == wanted or float(cell) == float(wanted), (cell, wanted)
    lone = GrowingCsv(tmp_path / "lone.csv")
    lone.write_row({"x": None})  # a row of one empty field: csv writes it quoted, not as an empty line
    lone.close()
    assert (tmp_path / "lone.csv").read_bytes() == b'x\r\n""\r\n'


# ---- total_config.py / formatted_total_config.py ------------------------------


def test_total_config_files_hold_config_and_hparams(tmp_path: Path) -> None:
    cfg = config(tmp_path, tracked=["lr"])
    hparams = {"lr": 3e-4, "env_id": "CartPole-v1", "net": {"layers": [64, 64], "act": "tanh"}, "gamma": math.nan, "clip": math.inf}
    with rltrack.make_logger(cfg) as logger:
        logger.log_hparams(hparams)
        logger.log_hparams({"seed": 7})  # a second call adds to the first
    expected_hparams = {**hparams, "gamma": "nan", "clip": "inf", "seed": 7}  # non-finite floats as text
    expected_config = rltrack.load_config(cfg)
    # make_logger fills in the task (under pytest: the run's name) and where the default stores go (the root)
    expected_config["run"].update(task=logger.name, stores=str(Path(expected_config["run"]["root"]).resolve()))
    for name in ("total_config.py", "formatted_total_config.py"):
        total = ast.literal_eval((logger.run_dir / name).read_text())
        assert total["hparams"] == expected_hparams, name
        assert total["config"] == expected_config, name


def test_nested_hparams_given_in_two_calls_are_merged(tmp_path: Path) -> None:
    with rltrack.make_logger(config(tmp_path, tracked=["opt/lr", "opt/eps"])) as logger:
        logger.log_hparams({"opt": {"lr": 0.1}})
        logger.log_hparams({"opt": {"eps": 1e-8}})
    total = ast.literal_eval((logger.run_dir / "total_config.py").read_text())
    assert total["hparams"] == {"opt": {"lr": 0.1, "eps": 1e-8}}
    assert read_meta(logger.run_dir)["tracked"] == {"opt/lr": 0.1, "opt/eps": 1e-8}


def test_total_config_loads_with_numpy_and_torch_hparams(tmp_path: Path) -> None:
    """numpy 2 reprs a float64 as `np.float64(0.5)`, which literal_eval rejects."""
    with rltrack.make_logger(config(tmp_path)) as logger:
        logger.log_hparams({"lr": np.float64(0.5), "n": np.int64(3), "beta": np.float32(0.25), "t": torch.tensor(2.0)})
    for name in ("total_config.py", "formatted_total_config.py"):
        total = ast.literal_eval((logger.run_dir / name).read_text())
        assert total["hparams"] == {"lr": 0.5, "n": 3, "beta": 0.25, "t": 2.0}


# ---- meta.json ----------------------------------------------------------------


def test_meta_json_describes_the_run(tmp_path: Path) -> None:
    before = time.time()
    logger = rltrack.make_logger(config(tmp_path, tracked=["lr", "env_id", "net/width", "missing"]))
    meta = read_meta(logger.run_dir)
    assert meta["status"] == "running"
    assert before - 1 <= datetime.fromisoformat(meta["start_time"]).timestamp() <= time.time() + 1
    assert meta["host"] == socket.gethostname()
    ipaddress.ip_address(meta["ip"])  # raises if it is not an address
    assert meta["pid"] == os.getpid()
    assert meta["rltrack_version"] == rltrack.__version__
    logger.log_hparams({"lr": 0.01, "env_id": "Hopper-v4", "net": {"width": 256}, "other": 1})
    assert logger.flush(timeout=120)  # flush waits for the agent's local files: a cold agent on a loaded machine took over 10 s
    assert read_meta(logger.run_dir)["tracked"] == {"lr": 0.01, "env_id": "Hopper-v4", "net/width": 256, "missing": None}
    assert read_meta(logger.run_dir)["status"] == "running"
    logger.close()
    assert read_meta(logger.run_dir)["status"] == "finished"


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (None, "finished"),
        (ValueError("x"), "failed"),
        (KeyboardInterrupt(), "killed"),
        (SystemExit(0), "finished"),
        (SystemExit(None), "finished"),
        (SystemExit(3), "failed"),
    ],
)
def test_status_after_a_with_block(tmp_path: Path, exc: BaseException | None, status: str) -> None:
    with pytest.raises(type(exc)) if exc else _nothing():
        with rltrack.make_logger(config(tmp_path)) as logger:
            logger.write({"x": 1.0}, step=1)
            if exc:
                raise exc
    assert read_meta(logger.run_dir)["status"] == status
    assert read_meta(logger.run_dir)["end_time"]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


# ---- git info -----------------------------------------------------------------


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _repo(tmp_path: Path, message: str) -> Path:
    """A git work tree with train.py committed (`lr = 0.1`) under `message`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text("lr = 0.1\n")
    _git(repo, "add", "train.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", message)
    return repo


def test_git_files_inside_a_work_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path, "first experiment")
    (repo / "train.py").write_text("lr = 0.2\n")
    monkeypatch.chdir(repo)
    with rltrack.make_logger(config(tmp_path)) as logger:
        pass
    assert "first experiment" in (logger.run_dir / "git_log.txt").read_text()
    diff = (logger.run_dir / "git_diff.txt").read_text()
    assert "-lr = 0.1" in diff and "+lr = 0.2" in diff


def test_runs_started_together_share_one_reading_of_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Tune driver starts a run per trial: git is asked once for all of them
    (it held a 64-trial sweep's loop for a minute), each run still gets the files."""
    repo = _repo(tmp_path, "sweep code")
    calls = tmp_path / "git_calls.txt"
    shim = tmp_path / "bin"
    shim.mkdir()
    real_git = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout.strip()
    (shim / "git").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real_git} "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(repo)
    run_dirs = []
    for trial in range(4):
        with rltrack.make_logger(config(tmp_path, f"trial{trial}")) as logger:
            pass
        run_dirs.append(logger.run_dir)
    assert len(calls.read_text().splitlines()) == 3  # rev-parse, log, diff: once
    assert all("sweep code" in (run_dir / "git_log.txt").read_text() for run_dir in run_dirs)


def test_run_info_is_saved_at_most_every_few_seconds_and_at_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tune sends its bookkeeping with every result: meta.json is not rewritten
    at every flush for it (a driver holding 64 trials rewrote 128 files a second)."""
    from rltrack.sinks import rundir

    monkeypatch.setattr(rundir, "INFO_SAVE_EVERY", 3600.0)  # the 20 flushes fall within it however loaded the machine
    logger = rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "info"}, "backends": {"use": ["memory"]}})
    meta = logger.run_dir / "meta.json"
    first = meta.stat().st_ino  # each save renames a new file over it
    for i in range(20):
        logger.set_run_info({"timestamp": i})
        assert logger.flush(timeout=10)
    assert meta.stat().st_ino == first and json.loads(meta.read_text())["info"] == {}
    logger.close()
    assert json.loads(meta.read_text())["info"] == {"timestamp": 19}


def test_no_git_files_outside_a_work_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # do not find a repo above tmp_path
    monkeypatch.chdir(outside)
    with rltrack.make_logger(config(tmp_path)) as logger:
        pass
    assert not (logger.run_dir / "git_log.txt").exists()
    assert not (logger.run_dir / "git_diff.txt").exists()


# ---- text logs ------------------------------------------------------------------


def parse_tables(text: str) -> list[dict[str, str]]:
    """The `| key | value |` rows of each table in a text log (title row excluded)."""
    tables: list[dict[str, str]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and i > 0 and lines[i - 1].startswith("+-") and (i < 2 or not lines[i - 2].startswith("| ")):
            tables.append({})  # a title row: a new table starts
            continue
        match = re.fullmatch(r"\| (.+?) +\| (.+?) +\|", line)
        if match and tables:
            tables[-1][match.group(1)] = match.group(2)
    return tables


def test_text_log_has_a_table_per_dump_with_the_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    dumps = []
    with rltrack.make_logger(config(tmp_path)) as logger:
        for i in range(4):
            values = {"total_loss": float(rng.normal()), "grad_norm": float(rng.uniform(0, 1e4))}
            logger.write(values, step={"train_iter": i}, namespace="optimizer")  # a user's own namespace: boxed tables
            logger.dump()
            dumps.append(values)
    text = (logger.run_dir / "log" / "optimizer" / "optimizer_logger.txt").read_text()
    tables = parse_tables(text)
    assert len(tables) == len(dumps)
    for table, values in zip(tables, dumps):
        assert set(table) == set(values)
        for key, value in values.items():
            assert float(table[key]) == pytest.approx(value, rel=1e-5)
    for i in range(4):
        assert f"train_iter={i}" in text


def test_text_log_tables_without_dump_never_mix_two_steps(tmp_path: Path) -> None:
    """A tight loop that never calls dump gets fewer tables (at most one a
    second), but each one holds the values of the step in its heading only."""
    with rltrack.make_logger(config(tmp_path)) as logger:
        for i in range(300):
            logger.write({"a": float(i)}, step=i, namespace="learner")
            if i % 2 == 0:  # "b" only on even steps: merging would show an old b under an odd step
                logger.write({"b": float(i)}, step=i, namespace="learner")
    text = (logger.run_dir / "log" / "learner" / "learner_logger.txt").read_text()
    steps = [int(s) for s in re.findall(r"step=(\d+)", text)]
    tables = [block.values for block in read_blocks(logger.run_dir / "log" / "learner" / "learner_logger.txt")]
    assert tables and len(steps) == len(tables)
    for step, table in zip(steps, tables):
        assert {float(v) for v in table.values()} == {float(step)}, (step, table)
    assert steps[-1] == 299  # the last values are never lost


def test_namespaces_that_look_like_paths_stay_inside_log(tmp_path: Path) -> None:
    namespaces = ["evaluation/env_runners", "../../escape", "/abs", "learners/default_policy"]
    before = set(tmp_path.rglob("*"))
    with rltrack.make_logger(config(tmp_path)) as logger:
        for i, namespace in enumerate(namespaces):
            logger.write({"v": float(i)}, step=1, namespace=namespace)
        logger.dump()
    created = set(tmp_path.rglob("*")) - before - {logger.run_dir.parent}
    assert all(p.is_relative_to(logger.run_dir) for p in created)
    logs = sorted((logger.run_dir / "log").glob("*/*_logger.txt"))
    assert len(logs) == len(namespaces)
    assert sorted(float(t["v"]) for p in logs for t in parse_tables(p.read_text())) == [0.0, 1.0, 2.0, 3.0]
    row = pd.read_csv(logger.run_dir / "progress.csv").iloc[0]
    assert [row[f"{ns}/v"] for ns in namespaces] == [0.0, 1.0, 2.0, 3.0]
    assert "core.errors" not in json.loads((logger.run_dir / "report.json").read_text())["counts"]


def test_log_text_lands_in_the_namespace_text_log(tmp_path: Path) -> None:
    with rltrack.make_logger(config(tmp_path)) as logger:
        logger.log_text("note", "switched to the hard level", step=3, namespace="collector")
        logger.log_text("msg", "plain message")
    assert "note: switched to the hard level" in (logger.run_dir / "log" / "collector" / "collector_logger.txt").read_text()
    main = list((logger.run_dir / "log").glob("*/*_logger.txt"))
    assert any("msg: plain message" in p.read_text() for p in main)


# ---- checkpoints ----------------------------------------------------------------


def test_checkpoint_of_a_state_dict_loads_back_unchanged(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    original = {k: v.clone() for k, v in net.state_dict().items()}
    with rltrack.make_logger(config(tmp_path)) as logger:
        assert logger.log_checkpoint(net.state_dict(), iteration=3) == "ckpt/iteration_3.pth.tar"
        with torch.no_grad():  # training goes on and changes the weights in place
            net.weight.add_(1.0)
            net.bias.zero_()
    loaded = torch.load(logger.run_dir / "ckpt" / "iteration_3.pth.tar")
    assert loaded.keys() == original.keys()
    for key in original:
        assert torch.equal(loaded[key], original[key]), key


def test_checkpoint_of_a_path_is_a_byte_copy_of_the_file_at_call_time(tmp_path: Path) -> None:
    source = tmp_path / "model.zip"  # SB3 style: the same file saved over and over
    contents = [os.urandom(100_000), os.urandom(50_000)]
    with rltrack.make_logger(config(tmp_path)) as logger:
        for i, data in enumerate(contents):
            source.write_bytes(data)
            logger.log_checkpoint(source, iteration=i)
        source.write_bytes(b"overwritten after the last checkpoint")
    for i, data in enumerate(contents):
        saved = (logger.run_dir / "ckpt" / f"iteration_{i}.pth.tar").read_bytes()
        assert hashlib.sha256(saved).digest() == hashlib.sha256(data).digest()


def test_checkpoint_of_a_missing_path_is_an_error(tmp_path: Path) -> None:
    with rltrack.make_logger(config(tmp_path)) as logger:
        with pytest.raises(FileNotFoundError, match="nope.pt"):
            logger.log_checkpoint(tmp_path / "nope.pt", iteration=1)


@pytest.mark.parametrize(
    ("higher_is_better", "metrics"),
    [
        (True, [1.0, 5.0, 3.0, 5.0, math.nan, 2.0]),
        (False, [4.0, 0.5, math.nan, 2.0, 0.5, 1.0]),
        (True, [math.nan, -1.0, 2.0]),  # a NaN first must not block every later best
    ],
)
def test_best_checkpoint_follows_the_metric(tmp_path: Path, higher_is_better: bool, metrics: list[float]) -> None:
    finite = [(m, i) for i, m in enumerate(metrics) if not math.isnan(m)]
    best_metric = max(m for m, _ in finite) if higher_is_better else min(m for m, _ in finite)
    best_iteration = next(i for m, i in finite if m == best_metric)  # the first to reach it
    best_seen = []
    with rltrack.make_logger(config(tmp_path)) as logger:
        for i, metric in enumerate(metrics):
            logger.log_checkpoint({"iteration": torch.tensor(i)}, iteration=i, metric=metric, higher_is_better=higher_is_better)
            best = logger.run_dir / "ckpt" / "ckpt_best.pth.tar"
            best_seen.append(int(torch.load(best)["iteration"]) if best.exists() else None)
    assert best_seen[-1] == best_iteration
    # at every point, the best file is the best of the metrics so far
    for n, seen in enumerate(best_seen, start=1):
        so_far = [(m, i) for m, i in finite if i < n]
        if not so_far:
            assert seen is None  # only NaN so far: no best yet
            continue
        target = max(m for m, _ in so_far) if higher_is_better else min(m for m, _ in so_far)
        assert seen == next(i for m, i in so_far if m == target)
    artifacts = [e for e in rltrack.read_journal(logger.run_dir) if e.kind == "artifact"]
    assert [e.data["iteration"] for e in artifacts] == list(range(len(metrics)))


# ---- run naming -----------------------------------------------------------------


def test_existing_name_gets_a_timestamp(tmp_path: Path) -> None:
    first = rltrack.make_logger(config(tmp_path, name="cartpole_ppo"))
    second = rltrack.make_logger(config(tmp_path, name="cartpole_ppo"))
    third = rltrack.make_logger(config(tmp_path, name="cartpole_ppo"))
    for logger in (first, second, third):
        logger.close()
    assert first.run_dir == tmp_path / "runs" / "cartpole_ppo"
    assert re.fullmatch(r"cartpole_ppo_\d{6}_\d{6}", second.run_dir.name)
    stamp = datetime.strptime(second.run_dir.name[-13:], "%y%m%d_%H%M%S")
    assert abs(stamp.timestamp() - time.time()) < 60
    assert third.run_dir.name.startswith("cartpole_ppo_") and len({first.run_dir, second.run_dir, third.run_dir}) == 3
    assert (first.run_dir / "meta.json").exists() and (third.run_dir / "meta.json").exists()


@pytest.mark.parametrize("name", ["../escape", "../../etc/x", "/abs/path", "a\x00b", "..", ".", "a/../../b", "~/home"])
def test_unsafe_names_stay_inside_the_root(tmp_path: Path, name: str) -> None:
    root = tmp_path / "runs"
    before = set(tmp_path.rglob("*"))
    with rltrack.make_logger({"run": {"root": str(root), "name": name}, "backends": {"use": ["local"]}}) as logger:
        logger.write({"x": 1.0}, step=0)
    assert logger.run_dir.resolve().parent == root.resolve()
    created = set(tmp_path.rglob("*")) - before
    assert all(p.resolve().is_relative_to(root.resolve()) for p in created)
    assert "\x00" not in logger.run_dir.name


def test_names_keep_letters_of_any_script_and_fit_the_file_system(tmp_path: Path) -> None:
    with rltrack.make_logger(config(tmp_path, name="倒立摆_ppo")) as logger:
        pass
    assert logger.run_dir.name == "倒立摆_ppo"
    long = rltrack.make_logger(config(tmp_path, name="lr=0.0003," * 60))  # 600 characters
    again = rltrack.make_logger(config(tmp_path, name="lr=0.0003," * 60))  # and the timestamped variant
    for logger in (long, again):
        logger.close()
        assert len(logger.run_dir.name.encode()) <= 255 and (logger.run_dir / "meta.json").exists()
    assert long.run_dir != again.run_dir


# ---- DI-engine stage blocks (rltrack.frameworks.stages) --------------------------------------


def test_stage_blocks_read_back_equal_the_tfevents_on_both_axes(tmp_path: Path) -> None:
    """Collector, learner and evaluator blocks, text parsed back: the numbers
    equal the tfevents' `<ns>_iter/<key>` at train_iter and `<ns>_step/<key>`
    at env_steps, except the counters DI-engine leaves out (the evaluator's
    train_iter, the collector's total_envstep_count against env steps); the
    collector's full-precision `key: value` lines; the evaluator's per-episode
    returns as DI-engine's eval_episode_return(_mean); ckpt_name the file name;
    [INFO] lines per episode; the learner's iteration line and model once."""
    from rltrack.frameworks import stages
    from rltrack.adapters.blocks import emit_block
    from stage_reader import read_blocks, read_info_lines, read_tfevents

    rng = np.random.default_rng(3)
    collector = stages.CollectorStats()
    sent: dict[str, list[dict[str, Any]]] = {"collector": [], "evaluator": [], "learner": []}
    logger = rltrack.make_logger({**config(tmp_path), "backends": {"use": ["local"], "local": {"tb_axes": ["iter", "step"]}}})
    env_steps = 0
    for it in range(1, 4):
        rewards = rng.normal(20, 5, size=int(rng.integers(1, 6))).tolist()
        lengths = rng.integers(5, 40, size=len(rewards)).tolist()
        env_steps += 128
        steps = {"env_steps": env_steps, "train_iter": it}
        block = collector.stage(episode_rewards=rewards, episode_lengths=lengths, envstep_count=128, duration=0.1 * it)
        emit_block(logger, "collector", block, steps)
        learner = {"cur_lr_avg": 1e-3 / it, "total_loss_avg": float(rng.normal()), "tiny_avg": 3e-7 * it}
        emit_block(logger, "learner", learner, steps, model=torch.nn.Linear(4, 2))
        ckpt = logger.log_checkpoint({"it": it}, iteration=it, metric=float(np.mean(rewards)))
        evaluation = stages.evaluator_block(episode_rewards=rewards, episode_lengths=lengths, duration=0.5, train_iter=it, ckpt_name=ckpt)
        emit_block(logger, "evaluator", evaluation, steps, info_lines=stages.evaluator_info_lines(rewards))
        for namespace, values in (("collector", block), ("learner", learner), ("evaluator", evaluation)):
            sent[namespace].append({"steps": steps, "values": values})
    logger.close()
    tfevents = read_tfevents(logger.run_dir / "log" / "serial")
    not_plotted = {("evaluator", "iter", "train_iter"), ("evaluator", "step", "train_iter"), ("collector", "step", "total_envstep_count")}
    for namespace, blocks in sent.items():
        text_log = logger.run_dir / "log" / namespace / f"{namespace}_logger.txt"
        read = read_blocks(text_log)
        assert len(read) == len(blocks)
        for got, expected in zip(read, blocks):
            assert got.steps == expected["steps"]
            shown = dict(expected["values"])
            if namespace == "evaluator":  # DI-engine 0.5's names for the returns, last
                shown["eval_episode_return"] = shown.pop("each_reward")
                shown["eval_episode_return_mean"] = shown["reward_mean"]
            assert list(got.values) == list(shown)  # every key, in DI-engine's order
            for key, value in got.values.items():
                if key in ("each_reward", "eval_episode_return"):
                    assert value == pytest.approx(shown[key], rel=1e-12 if namespace == "collector" else 1e-5)
                elif isinstance(value, (int, float)):
                    # grids: DI-engine's {:.6f} (6 digits kept below 1e-4); collector lines: full precision
                    assert value == (shown[key] if namespace == "collector" else pytest.approx(shown[key], rel=1e-5, abs=1e-6))
                    for name, axis in (("iter", "train_iter"), ("step", "env_steps")):
                        points = tfevents.get(f"{namespace}_{name}/{key}")
                        if (namespace, name, key) in not_plotted:
                            assert points is None, key
                        else:
                            assert points[got.steps[axis]] == pytest.approx([shown[key]], rel=1e-6), key
    assert not any(tag.startswith("collector/") for tag in tfevents)  # every value on the two named axes only
    learner_log = (logger.run_dir / "log" / "learner" / "learner_logger.txt").read_text()
    assert "| 0.001000   |" in learner_log and "| 3e-07    |" in learner_log  # {:.6f}, and 6 digits where it would print 0.000000
    evaluator_log = logger.run_dir / "log" / "evaluator" / "evaluator_logger.txt"
    finished = [r for b in sent["evaluator"] for r in b["values"]["each_reward"]]
    info = read_info_lines(evaluator_log)
    assert [float(re.search(r"final reward: (\S+),", line).group(1)) for line in info] == pytest.approx(finished, abs=1e-4)
    assert [b.values["ckpt_name"] for b in read_blocks(evaluator_log)] == [f"iteration_{i}.pth.tar" for i in (1, 2, 3)]
    best = max(sent["evaluator"], key=lambda b: b["values"]["reward_mean"])["values"]["ckpt_name"]
    assert (logger.run_dir / "ckpt" / "ckpt_best.pth.tar").read_bytes() == (logger.run_dir / "ckpt" / best).read_bytes()
    assert learner_log.count("[INFO] model:") == 1 and str(torch.nn.Linear(4, 2)) in learner_log
    assert re.findall(r"\]\[INFO\] === Training Iteration (\d+) Result ===\n", learner_log) == ["1", "2", "3"]


@pytest.mark.parametrize("bad", [["iter", "iter"], ["steps"], [], "iter", [1]])
def test_bad_tb_axes_is_a_config_error_naming_the_value_and_the_fix(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(rltrack.ConfigError, match=r"backends\.local: tb_axes = .* is not allowed.*\"iter\" \(train_iter\), \"step\" \(env_steps\).*e\.g\. tb_axes"):
        rltrack.make_logger({**config(tmp_path), "backends": {"use": ["local"], "local": {"tb_axes": bad}}})


def test_an_int_beyond_float_range_is_printed_in_the_text_tables(tmp_path: Path) -> None:
    """DI-engine's grids print numbers with {:.6f}, which raises for an int no
    float can hold; such a value keeps its digits instead of failing the table."""
    huge = 10**400
    with rltrack.make_logger(config(tmp_path, close_timeout=60)) as logger:
        logger.write({"count": huge, "loss": 0.5}, step={"train_iter": 1, "env_steps": 10}, namespace="learner")
        logger.dump()
    text = (logger.run_dir / "log" / "learner" / "learner_logger.txt").read_text()
    assert str(huge) in text and "0.500000" in text
    assert "errors" not in json.dumps(json.loads((logger.run_dir / "report.json").read_text())["counts"])


# ---- a full disk ------------------------------------------------------------------


def test_the_local_files_hold_each_record_once_when_the_disk_refuses_a_flush_and_takes_it_later(tmp_path: Path) -> None:
    """A real 1 MB tmpfs, filled but for a few KiB: the flush of 400 records
    (a column that appears late, text, TensorBoard) is refused part-way. Every
    file then holds whole records only, those of the first flush; once the
    disk has space the same flush writes the rest, once (before, a text
    file's buffer lost what the disk refused, and the agent moved on)."""
    import errno

    from disks import fill, tmpfs
    from stage_reader import read_tfevents

    from rltrack.core.events import Event
    from rltrack.core.report import Report
    from rltrack.sinks.base import RunContext
    from rltrack.sinks.local import LocalBackend

    def records(start: int, end: int) -> list[Event]:
        events = [Event(float(i), {"x": float(i), **({"late": -float(i)} if i >= 300 else {})}, steps={"step": i}) for i in range(start, end)]
        return events + [Event(float(end), {"note": f"after {end - 1}"}, steps={"step": end - 1}, kind="text")]

    with tmpfs(tmp_path / "disk", "1m") as disk:
        backend = LocalBackend()
        backend.open(RunContext(disk / "run", "run", {}, Report()))
        backend.write(records(0, 100))
        backend.dump()
        backend.flush()
        csv_path = disk / "run" / "progress.csv"
        on_disk = {path: path.read_bytes() for path in backend.outputs()}
        filler = fill(disk)
        os.truncate(filler, filler.stat().st_size - 8192)  # room for part of what comes
        backend.write(records(100, 500))
        backend.dump()
        with pytest.raises(OSError) as refused:
            backend.flush()
        assert refused.value.errno == errno.ENOSPC
        for path, data in on_disk.items():  # cut back: each file as the last flush that succeeded left it
            assert path.read_bytes() == data, path
        filler.unlink()
        backend.close("finished")
        csv = pd.read_csv(csv_path)
        assert csv["x"].tolist() == [float(i) for i in range(500)]
        assert csv["late"].isna().tolist() == [i < 300 for i in range(500)]
        assert read_tfevents(disk / "run" / "log" / "serial")["x"] == {i: [float(i)] for i in range(500)}
        notes = [line for line in (disk / "run" / "log" / "main" / "main_logger.txt").read_text().splitlines() if "note:" in line]
        assert [line.rsplit("note: ", 1)[1] for line in notes] == ["after 99", "after 499"]
