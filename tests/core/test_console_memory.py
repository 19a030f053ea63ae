"""The console backend (a table per dump on stdout) and the memory backend
(everything in process: .metrics, .steps, .events, .df)."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import rltrack
from rltrack.sinks.base import RunContext
from rltrack.sinks.console import ConsoleBackend
from rltrack.core.events import Event
from rltrack.core.report import Report


def make(tmp_path: Path, *backends: str) -> rltrack.Logger:
    return rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "t"}, "backends": {"use": list(backends)}})


def tables(text: str) -> list[tuple[str, dict[str, str]]]:
    """(title, {key: value}) of each box printed, in order."""
    found: list[tuple[str, dict[str, str]]] = []
    for block in re.findall(r"(\+-[-+]*\+\n(?:\|.*\|\n)+\+-[-+]*\+\n(?:\|.*\|\n)*\+-[-+]*\+)", text):
        rows = [re.fullmatch(r"\| (.*?) *\| (.*?) *\|", line) for line in block.splitlines() if line.startswith("|")]
        title = rows[0].group(1)
        found.append((title, {m.group(1): m.group(2) for m in rows[1:]}))
    return found


# ---- console ------------------------------------------------------------------


def test_console_prints_a_table_per_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    dumps = []
    with make(tmp_path, "console") as logger:
        for i in range(3):
            learner = {"total_loss": float(rng.normal()), "lr": 3e-4}
            collector = {"reward_mean": float(rng.uniform(0, 500))}
            logger.write(learner, step={"env_steps": 1000 * i}, namespace="learner")
            logger.write(collector, step={"env_steps": 1000 * i}, namespace="collector")
            logger.dump()
            dumps.append({"learner": learner, "collector": collector})
    out = capsys.readouterr().out
    printed = tables(out)
    assert [title for title, _ in printed] == ["learner", "collector"] * 3
    for (title, rows), expected in zip(printed, [d[ns] for d in dumps for ns in ("learner", "collector")]):
        assert set(rows) == set(expected), title
        for key, value in expected.items():
            assert float(rows[key]) == pytest.approx(value, rel=1e-5)
    for i in range(3):
        assert f"env_steps={1000 * i}" in out


def test_console_prints_held_values_at_close(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logger = make(tmp_path, "console")
    logger.write({"x": 1.5}, step=1)
    assert logger.flush(timeout=10)
    assert tables(capsys.readouterr().out) == []  # waiting for the dump
    logger.close()
    assert tables(capsys.readouterr().out) == [("main", {"x": "1.5"})]


def test_console_backend_writes_to_a_given_stream(tmp_path: Path) -> None:
    stream = io.StringIO()
    console = ConsoleBackend(stream=stream)
    console.open(RunContext(run_dir=tmp_path, name="t", config={}, report=Report()))
    console.write([Event(time.time(), {"fps": 1234.0, "loss": 0.25}, namespace="time", steps={"step": 9})])
    console.dump()
    console.write([Event(time.time(), {"text": "not a number"}, kind="text")])
    console.close("finished")
    assert tables(stream.getvalue()) == [("time", {"fps": "1234", "loss": "0.25"})]
    assert "step=9" in stream.getvalue()


# ---- memory -------------------------------------------------------------------


def test_memory_backend_keeps_metrics_steps_and_a_dataframe(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rewards = rng.normal(size=5)
    losses = rng.normal(size=5)
    with make(tmp_path, "memory") as logger:
        for i in range(5):
            logger.write({"reward_mean": rewards[i]}, step={"env_steps": 100 * i, "train_iter": i}, namespace="collector")
            logger.write({"loss": losses[i]}, step={"train_iter": i}, namespace="learner")
        logger.write({"hist": np.arange(5.0)}, step={"train_iter": 5}, namespace="learner")
        logger.log_text("msg", "hello")
        memory = logger.backends["memory"]
        assert logger.flush(timeout=10)
        assert memory.status is None  # still running
    assert memory.status == "finished"
    assert memory.metrics == {"collector/reward_mean": pytest.approx(list(rewards)), "learner/loss": pytest.approx(list(losses))}
    assert memory.steps == {"collector/reward_mean": [100 * i for i in range(5)], "learner/loss": list(range(5))}
    assert [e.kind for e in memory.events].count("histogram") == 1
    assert any(e.kind == "text" and e.data == {"msg": "hello"} for e in memory.events)
    df = memory.df
    assert isinstance(df, pd.DataFrame) and len(df) == 10
    assert {"time", "namespace", "env_steps", "train_iter", "collector/reward_mean", "learner/loss"} <= set(df.columns)
    collector = df[df["namespace"] == "collector"]
    np.testing.assert_allclose(collector["collector/reward_mean"], rewards)
    assert collector["env_steps"].tolist() == [100 * i for i in range(5)]
    assert df[df["namespace"] == "learner"]["env_steps"].isna().all()


def test_memory_df_of_an_empty_run(tmp_path: Path) -> None:
    with make(tmp_path, "memory") as logger:
        pass
    assert logger.backends["memory"].df.empty
    assert logger.backends["memory"].metrics == {}


def test_memory_backend_does_not_share_data_with_the_caller(tmp_path: Path) -> None:
    record: dict[str, Any] = {"x": 1.0}
    with make(tmp_path, "memory") as logger:
        logger.write(record, step=0)
        record["x"] = 2.0  # the caller reuses its dict
        logger.write(record, step=1)
    assert logger.backends["memory"].metrics["x"] == [1.0, 2.0]
