"""The Neptune backend, with the real neptune 1.x client in offline mode,
read back from the operations it queued in `.neptune/offline/run__*/data-*.log`.

What is checked against the journal: every value at its step and timestamp,
the documented rule for steps that do not increase (dropped and counted,
exact repeats ignored), NaN/inf/None counted, and each other kind where
Neptune puts it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import rltrack


@pytest.fixture(autouse=True)
def neptune_env(tmp_path, monkeypatch):
    for var in ("NEPTUNE_API_TOKEN", "NEPTUNE_PROJECT", "NEPTUNE_MODE", "NEPTUNE_DATA_DIRECTORY", "RLTRACK_BACKENDS", "RLTRACK_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def make(root: Path, name: str, **settings: Any) -> rltrack.Logger:
    return rltrack.make_logger({"run": {"root": str(root), "name": name}, "backends": {"use": ["neptune"], "neptune": settings}})


def operations(run_dir: Path) -> list[dict[str, Any]]:
    """The queued operations of the run's single offline Neptune folder, in order."""
    (folder,) = (run_dir / ".neptune" / "offline").iterdir()
    files = sorted(folder.glob("data-*.log"), key=lambda p: int(p.stem.split("-")[1]))
    return [json.loads(line)["obj"] for f in files for line in f.read_text().splitlines() if line.strip()]


def series(ops: list[dict[str, Any]], op_type: str) -> dict[str, list[tuple[Any, Any, float]]]:
    """path -> [(step, value, ts)] of every Log<op_type> operation."""
    out: dict[str, list[tuple[Any, Any, float]]] = {}
    for op in ops:
        if op["type"] == op_type:
            out.setdefault("/".join(op["path"]), []).extend((v["step"], v["value"], v["ts"]) for v in op["values"])
    return out


def expected_floats(run_dir: Path) -> tuple[dict[str, list[tuple[int, float, float]]], int]:
    """Scalar points by tag per the documented rule, and how many are dropped for their step."""
    kept: dict[str, list[tuple[int, float, float]]] = {}
    dropped = 0
    for e in rltrack.read_journal(run_dir):
        if e.kind not in ("scalars", "timing"):
            continue
        points = dict(e.data) | {axis: v for axis, v in list(e.steps.items())[1:] if axis not in e.data}
        for key, value in points.items():
            if value is None or not math.isfinite(value):
                continue
            line = kept.setdefault(e.tag(key), [])
            if line and e.primary_step <= line[-1][0]:
                dropped += (e.primary_step, value) != line[-1][:2]
                continue
            line.append((e.primary_step, value, e.time))
    return kept, dropped


@pytest.fixture
def full_run(tmp_path):
    logger = make(tmp_path / "runs", "everything", tags=["ppo"])
    logger.log_hparams({"lr": 3e-4, "net": {"layers": [64, 64], "act": "tanh"}, "seed": None})
    for resumed, steps in enumerate([range(0, 100, 10), range(50, 120, 10)]):  # resumed from 50: five earlier steps
        for env_steps in steps:
            logger.write({"reward_mean": env_steps / 10 + resumed}, step={"env_steps": env_steps, "train_iter": env_steps // 10}, namespace="collector")
    logger.write({"reward_mean": 12.0}, step={"env_steps": 110, "train_iter": 11}, namespace="collector")  # an exact repeat
    for i in range(5):
        logger.write({"total_loss_avg": 1.0 / (i + 1), "none": None}, step={"train_iter": i}, namespace="learner")
    logger.write({"nan": float("nan"), "inf": float("-inf"), "ok": 1}, step={"env_steps": 7}, namespace="evaluator")
    logger.write({"kind_change": 1.0}, step=1, namespace="evaluator")
    logger.log_text("kind_change", "now text", step=2, namespace="evaluator")
    logger.log_text("summary", "x" * 1500, step={"env_steps": 11}, namespace="evaluator")
    logger.write({"q": [0.0, 1.0, 2.0, float("nan")]}, step={"env_steps": 10}, namespace="learner", kind="histogram")
    Image.fromarray(np.full((4, 6, 3), 200, dtype=np.uint8)).save(logger.run_dir / "frame.png")
    frames = [Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)) for i in range(3)]
    frames[0].save(logger.run_dir / "clip.gif", save_all=True, append_images=frames[1:])
    logger.write({"frame": "frame.png", "pixels": np.arange(24, dtype=np.uint8).reshape(4, 6).tolist()}, step={"env_steps": 12}, namespace="evaluator", kind="image")
    logger.write({"clip": "clip.gif", "missing": "nope.gif"}, step={"env_steps": 13}, namespace="evaluator", kind="video")
    (logger.run_dir / "weights.bin").write_bytes(b"weights")  # a path is copied as is (no torch.save)
    logger.log_checkpoint(logger.run_dir / "weights.bin", iteration=3, metric=1.0)
    assert logger.close(timeout=120)
    return logger


def test_every_scalar_is_in_the_offline_folder_at_its_step_and_time(full_run):
    got = series(operations(full_run.run_dir), "LogFloats")
    expected, dropped = expected_floats(full_run.run_dir)
    assert dropped == 5 + 4  # reward_mean at 50..90; train_iter at 50..80 (at 90 it repeats the last point exactly)
    for tag, points in expected.items():
        assert [(s, v, t) for s, v, t in got[tag]] == points, tag
    assert [s for s, _, _ in got["collector/reward_mean"]] == [*range(0, 100, 10), 100, 110]
    assert [v for _, v, _ in got["collector/train_iter"]] == [*range(10), 10, 11]  # the other axis, as a series
    assert "learner/none" not in got and "evaluator/nan" not in got and got["evaluator/ok"] == [(7, 1, got["evaluator/ok"][0][2])]


def test_dropped_values_are_counted_in_the_report(full_run):
    counts = json.loads((full_run.run_dir / "report.json").read_text())["counts"]
    dropped = counts["neptune.dropped"]
    assert dropped["step not above the series' last step (Neptune needs increasing steps)"] == 5 + 4
    assert dropped["non-finite value (Neptune takes finite floats only)"] == 2
    assert dropped["None value"] == 5
    assert dropped["evaluator/kind_change: a float series cannot take a string value"] == 1
    assert dropped["file missing"] == 1
    assert counts["neptune.cut"] == {"text cut to Neptune's 1000 characters": 1}  # lost: said on stderr too


def test_other_kinds_parameters_checkpoints_and_status(full_run):
    ops = operations(full_run.run_dir)
    assigned = {"/".join(op["path"]): op["value"] for op in ops if op["type"].startswith("Assign")}
    assert assigned["parameters/lr"] == 3e-4 and assigned["parameters/net/act"] == "tanh"
    assert assigned["parameters/net/layers"] == "[64, 64]" and assigned["parameters/seed"] == "None"
    assert assigned["sys/name"] == "everything" and assigned["sys/failed"] is False
    assert [sorted(op["values"]) for op in ops if op["type"] == "AddStrings" and op["path"] == ["sys", "tags"]] == [["everything", "ppo"]]  # the task is a tag (Neptune keeps tags in a set: any order)

    strings = series(ops, "LogStrings")
    assert strings["evaluator/summary"][0][:2] == (11, "x" * 1000)
    stats = series(ops, "LogFloats")
    assert {k: v[0][1] for k, v in stats.items() if k.startswith("learner/q/")} == {
        "learner/q/min": 0.0, "learner/q/max": 2.0, "learner/q/mean": 1.0, "learner/q/std": pytest.approx(math.sqrt(2 / 3))
    }
    images = series(ops, "LogImages")
    assert sorted(images) == ["evaluator/frame", "evaluator/pixels"]
    assert all(step == 12 and value["data"] for points in images.values() for step, value, _ in points)

    uploads = {"/".join(op["path"]): op["file_path"] for op in ops if op["type"] == "UploadFile"}
    checkpoint = str(full_run.run_dir / "ckpt" / "iteration_3.pth.tar")
    assert uploads == {"evaluator/clip/13": str(full_run.run_dir / "clip.gif"), "checkpoints/iteration_3": checkpoint, "checkpoints/best": checkpoint}


def test_a_failed_run_is_marked_failed_and_debug_mode_queues_nothing(tmp_path):
    logger = make(tmp_path, "failed")
    logger.write({"x": 1.0}, step=1)
    assert logger.close(timeout=60, status="failed")
    ops = operations(logger.run_dir)
    assert [op["value"] for op in ops if op["path"] == ["sys", "failed"]][-1] is True

    logger = make(tmp_path, "debug", mode="debug")
    logger.write({"x": 1.0}, step=1)
    assert logger.close(timeout=60)
    assert not (logger.run_dir / ".neptune" / "offline").exists() and not (tmp_path / ".neptune").exists()


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"api_token": "secret"}, "NEPTUNE_API_TOKEN"), ({"mode": "read-only"}, "offline, debug, async, sync"), ({"tags": "a"}, "list of strings")],
)
def test_config_mistakes_are_config_errors(tmp_path, settings, message):
    with pytest.raises(rltrack.ConfigError, match=message):
        make(tmp_path, "bad", **settings)


def test_keys_with_empty_path_parts_get_series_of_their_own_and_the_rename_is_recorded(tmp_path):
    """Neptune's client drops empty path parts: `ns/a//b` and `ns/a/b` were
    one series with every step twice (a server refuses the repeats), and no
    rename was recorded."""
    from rltrack.trackers.neptune.backend import neptune_path

    logger = make(tmp_path / "runs", "paths")
    for step in range(1, 6):
        logger.write({"a//b": float(step), "a/b": 10.0 * step, "/lead": 1.0}, step=step, namespace="ns")
    assert logger.close(timeout=120)
    got = series(operations(logger.run_dir), "LogFloats")
    mapped = neptune_path("ns/a//b")
    assert mapped.startswith("ns/a/b-") and mapped != "ns/a/b"
    assert [(s, v) for s, v, _ in got["ns/a/b"]] == [(step, 10.0 * step) for step in range(1, 6)]  # each step once
    assert [(s, v) for s, v, _ in got[mapped]] == [(step, float(step)) for step in range(1, 6)]
    renamed = json.loads((logger.run_dir / "report.json").read_text())["renamed"]["neptune"]
    assert renamed == {"ns/a//b": mapped, "ns//lead": neptune_path("ns//lead")}


def test_keys_in_reserved_namespaces_are_renamed_and_listed_never_written_into_neptunes_fields(tmp_path):
    """A user's `sys/failed`, `sys/name` or `sys/tags` was dropped by the
    client (a Boolean or String field has no `extend`), with its help page in
    the report; `sys/x` and `monitoring/cpu` went into Neptune's own namespaces."""
    logger = make(tmp_path / "runs", "reserved")
    for step in range(1, 4):
        logger.write({"failed": 1.0 * step, "name": 2.0 * step, "x": 3.0 * step}, step=step, namespace="sys")
        logger.write({"cpu": 4.0 * step}, step=step, namespace="monitoring")
        logger.write({"entrypoint": 5.0 * step}, step=step, namespace="source_code")
        logger.write({"lr": 6.0 * step}, step=step, namespace="parameters")
        logger.log_text("tags", f"text {step}", step=step, namespace="sys")
    logger.log_hparams({"lr": 0.1})
    assert logger.close(timeout=900)  # a bound for a saturated machine (the agent runs at the lowest priority), never reached while things work
    ops = operations(logger.run_dir)
    floats, strings = series(ops, "LogFloats"), series(ops, "LogStrings")
    for path, factor in [("user_sys/failed", 1), ("user_sys/name", 2), ("user_sys/x", 3), ("user_monitoring/cpu", 4), ("user_source_code/entrypoint", 5), ("user_parameters/lr", 6)]:
        assert [(s, v) for s, v, _ in floats[path]] == [(step, float(factor * step)) for step in range(1, 4)], path
    assert [(s, v) for s, v, _ in strings["user_sys/tags"]] == [(step, f"text {step}") for step in range(1, 4)]
    assert not [path for path in (*floats, *strings) if path.startswith(("sys/", "monitoring/", "source_code/", "parameters/"))]
    assert set(op["value"] for op in ops if op["type"] == "AssignBool" and op["path"] == ["sys", "failed"]) == {False}  # Neptune's own flag: the run finished
    assert [op["value"] for op in ops if op["type"] == "AssignFloat" and op["path"] == ["parameters", "lr"]] == [0.1]
    report = json.loads((logger.run_dir / "report.json").read_text())
    assert report["renamed"]["neptune"] == {
        "sys/failed": "user_sys/failed", "sys/name": "user_sys/name", "sys/x": "user_sys/x", "monitoring/cpu": "user_monitoring/cpu",
        "source_code/entrypoint": "user_source_code/entrypoint", "parameters/lr": "user_parameters/lr", "sys/tags": "user_sys/tags",
    }  # fmt: skip
    assert not [name for name in report["counts"] if name.startswith("neptune.")], report["counts"]


def test_neptunes_help_page_is_not_pasted_into_rltracks_messages():
    """The client's missing-token error is a page of advice in terminal
    colours, including `api_token=` in code, which rltrack refuses (issue 27)."""
    from neptune.exceptions import NeptuneMissingApiTokenException, ProjectNotFound

    from rltrack.trackers.neptune.backend import NeptuneBackend
    from rltrack.trackers.remote import error_text

    exc = NeptuneMissingApiTokenException()
    assert "\n" in str(exc) and "api_token" in str(exc)  # what the client says
    text = error_text(exc)
    assert text == "NeptuneMissingApiTokenException: The Neptune client couldn't find your API token."
    fix = NeptuneBackend().judge(exc).fix
    assert fix is not None and "NEPTUNE_API_TOKEN" in fix and "api_token=" not in fix
    assert NeptuneBackend().judge(ProjectNotFound("w/p")).fix is not None
    assert NeptuneBackend().judge(ConnectionError("down")).fix is None  # may pass: retried with backoff
