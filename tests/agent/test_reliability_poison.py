"""One poisoned record never stops a delivery, and a run's identity in a tracker is the run.

Each case of issue 37's list writes 200 values of `x` through every store
(progress.csv, TensorBoard, MLflow on SQLite, W&B offline, trackio, Neptune
offline), with
one poisoned record before value 100, then reads every store back with its
own reader: each of the 200 values exactly once, the poisoned value where a
store takes it, and where a store refuses it, counted in report.json's
`<store>.refused` with its place in the journal; nothing pending, no error.
The case `held` puts every odd input that already held before into one run
(NUL bytes in scalar keys, namespaces, values and dict keys; NaN and ±inf;
step 2**62; a 3 MB string; 10,000 keys; 600-character keys; characters
MLflow refuses; poisoned hparams; path-like text keys) and checks the same.

Then a run directory made again at the same path gets new tracker runs
(trackio, W&B, MLflow) holding only its own values, and resumed, keeps them.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest
import wandb_reader
from reliability_helpers import child_env, close_delivered, mlflow_run, neptune_floats
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trackio_reader import store

import rltrack
from rltrack.core.events import Event
from rltrack.core.refusals import NON_FINITE_ENTRY, STEP_BEYOND_64_BITS
from rltrack.delivery.cursor import tracker_state

VALUES = 200
POISON_AT = 100
TASK = "poison"
STORES = ["local", "tensorboard", "mlflow", "wandb", "trackio", "neptune"]
EVERY_DELIVERY = ("files", "mlflow", "wandb", "trackio", "neptune")
#: Seconds `close` and `rltrack sync` may take: a bound for a machine under heavy load (the agent runs at
#: the lowest priority; on a quiet machine a case takes seconds), never reached while things work.
PATIENCE = 900
ODD_KEYS = {f"k{i}": float(i) for i in range(10_000)}
#: The poison scenarios run again, beside busy loops, in the reliability lane (`make test-reliability`).
pytestmark = pytest.mark.reliability


def held(logger: rltrack.Logger, step: int) -> None:
    """Every odd input of the issue's "what held" list, in one go."""
    logger.write({"nul\x00key": 1.0, "dict": {"in\x00ner": 2.0}, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}, step=step)
    logger.write({"v": 1.0}, step=step, namespace="name\x00space")
    logger.write({"s": "a\x00b"}, step=step)
    logger.write({"big_step": 1.0}, step=2**62)
    logger.log_text("huge", "x" * 3_000_000, step=step)
    logger.write(ODD_KEYS, step=step)
    logger.write({"k" * 600: 1.0, "odd!chars?<>|*": 2.0, "a//b/../c": 3.0}, step=step)
    logger.log_hparams({"lr\x00": "a\x00b", "": 1, "n" * 600: [1, {"x": None}], "nested": {"../up": "v"}})
    logger.log_text("../../escape/../x", "path-like", step=step)
    logger.log_text("/abs/text", "path-like", step=step)


def nothing(logger: rltrack.Logger, step: int) -> None:
    """No poison."""


#: case -> (what it writes at POISON_AT, the deliveries that refuse it and count it as refused)
CASES: dict[str, tuple[Callable[[rltrack.Logger, int], None], tuple[str, ...]]] = {
    "nul_in_text_key": (lambda lg, i: lg.log_text("a\x00b", "hello", step=i), ("wandb",)),
    "empty_text_key": (lambda lg, i: lg.log_text("", "hello", step=i), ("wandb",)),
    "surrogate_in_value": (lambda lg, i: lg.write({"s": "a\ud800b"}, step=i), EVERY_DELIVERY),
    "surrogate_in_text": (lambda lg, i: lg.log_text("t", "a\ud800b", step=i), EVERY_DELIVERY),
    "text_key_over_255_bytes": (lambda lg, i: lg.log_text("é" * 128, "hello", step=i), ("wandb",)),
    "wandb_reserved_names": (lambda lg, i: lg.write({"_step": 5.0, "_runtime": 6.0, "_timestamp": 7.0}, step=i), ()),
    "time_names_no_date": (lambda lg, i: lg.emit(Event(math.nan, {"x": -1.0}, steps={"step": i})), EVERY_DELIVERY),
    "int_beyond_64_bits": (lambda lg, i: lg.write({"big": 2**70, "huge": 10**400}, step=i), ()),
    "step_beyond_64_bits": (lambda lg, i: lg.write({"y": 1.0}, step=2**70), EVERY_DELIVERY),
    "neptune_reserved_namespaces": (lambda lg, i: lg.write({"failed": 1.0, "name": 2.0}, step=i, namespace="sys"), ()),
    "held": (held, ()),
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A home, tracker settings and agent of their own for the module's runs (each case a run of its own)."""
    home = tmp_path_factory.mktemp("poison")
    with pytest.MonkeyPatch.context() as mp:
        for var, value in child_env(home).items():
            if var.startswith(("WANDB_", "HOME", "MLFLOW_")):
                mp.setenv(var, value)
        mp.chdir(home)
        yield home


def make(root: Path, name: str, resume: Path | None = None) -> rltrack.Logger:
    return rltrack.make_logger({"run": {"root": str(root), "name": name, "task": TASK}, "backends": {"use": STORES}}, resume=resume)


def run_case(root: Path, name: str, poison: Callable[[rltrack.Logger, int], None], values: range, resume: Path | None = None) -> Path:
    logger = make(root, name, resume)
    for i in values:
        if i == POISON_AT:
            poison(logger, i)
        logger.write({"x": float(i)}, step=i)
    assert close_delivered(logger), (logger.run_dir / "report.json").read_text()
    return logger.run_dir


def report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())  # type: ignore[no-any-return]


def csv_values(run_dir: Path) -> list[float]:
    return pd.read_csv(run_dir / "progress.csv")["x"].dropna().tolist()


def tensorboard_values(run_dir: Path) -> list[float]:
    accumulator = EventAccumulator(str(run_dir / "log" / "serial"), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [s.value for s in accumulator.Scalars("x")]


def mlflow_values(run_dir: Path) -> list[float]:
    client, run_id = mlflow_run(run_dir)
    return [m.value for m in sorted(client.get_metric_history(run_id, "x"), key=lambda m: m.step)]


def wandb_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [row for path in wandb_reader.run_files(run_dir) for row in wandb_reader.history(path)]


def trackio_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of this run's trackio run (by its id: a run made again at the same path has the same name)."""
    run_id = tracker_state(run_dir, "trackio")["id"]
    return store(run_dir.parent / "trackio", TASK, run_id)["by_id"][run_id]  # type: ignore[no-any-return]


def every_store(run_dir: Path) -> dict[str, list[float]]:
    return {
        "progress.csv": csv_values(run_dir),
        "tensorboard": tensorboard_values(run_dir),
        "mlflow": mlflow_values(run_dir),
        "wandb": [row["x"] for row in wandb_rows(run_dir) if "x" in row],
        "trackio": [row["x"] for row in trackio_rows(run_dir) if "x" in row],
        "neptune": [value for _, value in neptune_floats(run_dir, "x")],
    }


#: The cases the reliability lane runs again beside busy loops: one record every delivery refuses, one only W&B refuses.
IN_THE_LANE = ("surrogate_in_value", "nul_in_text_key")


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.reliability) if case in IN_THE_LANE else case for case in CASES])
def test_a_poisoned_record_is_left_out_counted_and_never_stops_a_store(home: Path, case: str) -> None:
    poison, refusers = CASES[case]
    run_dir = run_case(home / "runs", case, poison, range(VALUES))

    expected = [float(i) for i in range(VALUES)]
    assert every_store(run_dir) == dict.fromkeys(["progress.csv", "tensorboard", "mlflow", "wandb", "trackio", "neptune"], expected)
    counts = report(run_dir)["counts"]
    assert not [name for name in counts if name.endswith((".errors", ".pending"))], counts
    refused = {name.partition(".")[0]: reasons for name, reasons in counts.items() if name.endswith(".refused")}
    assert sorted(refused) == sorted(refusers), counts
    for reasons in refused.values():  # one record, named by its place in the journal
        assert sum(reasons.values()) == 1 and all("journal.jsonl line ending at byte" in reason for reason in reasons), reasons


def same_poison(logger: rltrack.Logger, step: int) -> None:
    """Issue 42's poison: NaN and ±inf in a histogram, a step beyond 64 bits, fractional steps."""
    logger.write({"h": [1.0, math.nan, math.inf, -math.inf, 2.0]}, kind="histogram", step=step)
    logger.write({"y": 1.0}, step=2**70)
    with pytest.raises(ValueError, match="'step' = 0.25 is no whole number"):
        logger.write({"y": 2.0}, step={"step": 0.25})  # refused at the call: never cut onto step 0
    logger.emit(Event(time.time(), {"z": 3.0}, steps={"step": step, "frac": 0.5}))  # an adapter's event: the axis dropped, counted


@pytest.mark.slow
def test_the_same_poison_is_counted_with_the_same_reason_by_every_sink_and_tracker(home: Path) -> None:
    run_dir = run_case(home / "runs", "same_poison", same_poison, range(VALUES))
    expected = [float(i) for i in range(VALUES)]
    assert every_store(run_dir) == dict.fromkeys(["progress.csv", "tensorboard", "mlflow", "wandb", "trackio", "neptune"], expected)
    counts = report(run_dir)["counts"]
    assert not [name for name in counts if name.endswith((".errors", ".pending"))], counts
    for delivery in EVERY_DELIVERY:
        reasons: dict[str, int] = {}
        for reason, n in counts[f"{delivery}.refused"].items():
            what = reason.partition(": journal.jsonl line ending at byte")[0]
            reasons[what] = reasons.get(what, 0) + n
        assert reasons == {NON_FINITE_ENTRY: 3, f"scalars event: {STEP_BEYOND_64_BITS}": 1}, (delivery, counts)
    assert [reason for reason in counts["core.dropped"] if "'frac' = 0.5 is no whole number" in reason], counts
    accumulator = EventAccumulator(str(run_dir / "log" / "serial"), size_guidance={"histograms": 0, "scalars": 0})
    accumulator.Reload()
    (histogram,) = accumulator.Histograms("h")  # the finite entries are kept
    assert (histogram.step, histogram.histogram_value.num, histogram.histogram_value.sum) == (POISON_AT, 2, 3.0)
    assert [value for _, value in neptune_floats(run_dir, "h/max")] == [2.0]
    assert [row["z"] for row in wandb_rows(run_dir) if "z" in row] == [3.0]


def test_wandb_reserved_names_are_renamed_and_listed_never_overwritten(home: Path) -> None:
    run_dir = run_case(home / "runs", "reserved_read_back", CASES["wandb_reserved_names"][0], range(POISON_AT + 1))
    rows = wandb_rows(run_dir)
    mine = [row for row in rows if "user_step" in row]
    assert [(row["user_step"], row["user_runtime"], row["user_timestamp"]) for row in mine] == [(5.0, 6.0, 7.0)]
    assert [row["_step"] for row in rows] == list(range(len(rows)))  # W&B's own columns are W&B's
    assert mine[0]["_timestamp"] > 1e9
    assert report(run_dir)["renamed"]["wandb"] == {"_step": "user_step", "_runtime": "user_runtime", "_timestamp": "user_timestamp"}


def test_a_text_key_over_255_bytes_reaches_mlflow_under_a_name_cut_by_bytes(home: Path) -> None:
    run_dir = run_case(home / "runs", "long_key_read_back", CASES["text_key_over_255_bytes"][0], range(POISON_AT + 1))
    client, run_id = mlflow_run(run_dir)
    renamed = report(run_dir)["renamed"]["mlflow"]["é" * 128]
    assert len(renamed.encode()) <= 250
    (folder,) = client.list_artifacts(run_id, "text")
    (text,) = client.list_artifacts(run_id, folder.path)
    assert folder.path == f"text/{renamed}" and client.download_artifacts(run_id, text.path, str(home)).endswith(".txt")


def test_sync_names_what_a_tracker_refused_and_delivers_the_rest(home: Path) -> None:
    """`rltrack sync --to wandb` of a run whose agent never delivered to W&B:
    it names the refused record and delivers the other values; `rltrack show` names it too."""
    import subprocess
    import sys

    logger = rltrack.make_logger({"run": {"root": str(home / "runs"), "name": "sync_refused", "task": TASK}, "backends": {"use": ["local"]}})
    for i in range(VALUES):
        if i == POISON_AT:
            logger.log_text("a\x00b", "hello", step=i)
        logger.write({"x": float(i)}, step=i)
    assert logger.close(timeout=PATIENCE)
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "sync", str(logger.run_dir), "--to", "wandb"], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "wandb: refused 1 values" in said and "a NUL byte in its name" in said and "once it answers" not in said
    assert [row["x"] for row in wandb_rows(logger.run_dir) if "x" in row] == [float(i) for i in range(VALUES)]
    shown = subprocess.run([sys.executable, "-m", "rltrack.cli", "show", str(logger.run_dir)], capture_output=True, text=True, timeout=PATIENCE)
    assert "wandb.refused: 1 left out" in shown.stdout and "a NUL byte in its name" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.slow
def test_a_run_made_again_at_the_same_path_gets_new_tracker_runs_with_only_its_own_values(home: Path) -> None:
    root = home / "again"
    first = run_case(root, "run", nothing, range(50, 250))
    ids = {tracker: tracker_state(first, tracker) for tracker in ("trackio", "wandb", "mlflow")}
    shutil.rmtree(first)
    second = run_case(root, "run", nothing, range(300))
    assert second == first
    again = {tracker: tracker_state(second, tracker) for tracker in ("trackio", "wandb", "mlflow")}
    assert again["trackio"]["id"] != ids["trackio"]["id"] and again["wandb"]["id"] != ids["wandb"]["id"]
    assert again["mlflow"]["run_id"] != ids["mlflow"]["run_id"]
    values = every_store(second)
    assert values["trackio"] == values["mlflow"] == values["wandb"] == [float(i) for i in range(300)]
    resumed = run_case(root, "run", nothing, range(300, 350), resume=second)  # a resumed run keeps its tracker runs
    assert resumed == second
    kept = {tracker: tracker_state(resumed, tracker) for tracker in ("trackio", "wandb", "mlflow")}
    assert (kept["trackio"]["id"], kept["wandb"]["id"], kept["mlflow"]["run_id"]) == (again["trackio"]["id"], again["wandb"]["id"], again["mlflow"]["run_id"])
    values = every_store(resumed)
    assert values["trackio"] == values["mlflow"] == values["wandb"] == values["neptune"] == [float(i) for i in range(350)]
