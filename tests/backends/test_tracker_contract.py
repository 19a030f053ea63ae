"""The contract every tracker keeps, run against each through the one
interface delivery uses (`RemoteBackend`, fed by a `DeliveryWorker` with
the events' ids and the tracker's saved state), each read back from its real
store: MLflow's SQLite file, trackio's SQLite file, W&B's offline `.wandb`
files, Neptune's offline folders. W&B (a wandb-core process per run) and
Neptune (seconds to import) are the `slow` lane. The trackers are the ones
registered in the entry-point group `rltrack.trackers` (rltrack's own and
the example plug-in of tests/plugin, installed into the test environment):
a registered tracker without a case here fails the suite.

* every value arrives once, in order, at its step;
* a delivery killed mid-batch (the tracker holds part of what it was given,
  the cursor is behind it) and resumed by a new delivery leaves no value
  doubled and none lost;
* two equal events in different batches both arrive (Neptune's series take
  one point per step: there the second is a point it cannot take);
* what a tracker cannot take is counted as dropped in the report.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import wandb_reader
from journal_batch import journal_batch
from mlflow_server import history, tracker
from reliability_helpers import neptune_floats
from trackio_reader import store

from rltrack.delivery.registry import backend_class, backend_types
from rltrack.sinks.base import RunContext
from rltrack.trackers.remote import RemoteBackend
from rltrack.delivery.worker import DeliveryWorker
from rltrack.core.events import Event
from rltrack.core.report import Report
from rltrack.sinks.rundir import create_run_dir

KEY = "learner/x"
BATCH = 4  # events per delivery: every journal below spans several batches
GIVE_UP = 120.0  # seconds a failing tracker is retried before the test fails on what it holds


def scalar(step: int, value: float | None = None) -> Event:
    return Event(1_700_000_000.0 + step, {"x": float(step) if value is None else value}, namespace="learner", steps={"step": step})


def mlflow_values(run_dir: Path) -> list[tuple[int, float]]:
    return history(*tracker(run_dir), KEY)


def trackio_values(run_dir: Path) -> list[tuple[int, float]]:
    held = store(run_dir.parent / "trackio", "contract")
    return [(row["step"], row[KEY]) for run in held["runs"] for row in held["logs"][run] if KEY in row]


def wandb_values(run_dir: Path) -> list[tuple[int, float]]:
    rows = [row for path in wandb_reader.run_files(run_dir) for row in wandb_reader.history(path)]
    return [(row["step"], row[KEY]) for row in rows if KEY in row]


def neptune_values(run_dir: Path) -> list[tuple[int, float]]:
    return neptune_floats(run_dir, KEY)


@dataclass
class Tracker:
    """One tracker: its settings, its store read back, an event of a kind it cannot take."""

    name: str
    values: Callable[[Path], list[tuple[int, float]]]
    refused: Event
    settings: dict[str, Any] = field(default_factory=dict)
    one_point_per_step: bool = False

    def backend(self, run_dir: Path) -> RemoteBackend:
        backend = backend_class(self.name)(**self.settings)
        assert isinstance(backend, RemoteBackend)
        backend.rules = dataclasses.replace(backend.rules, max_batch=BATCH)
        backend.open(RunContext(run_dir, "run", {"run": {"task": "contract"}}, Report()))
        return backend

    def deliver(self, run_dir: Path) -> DeliveryWorker:
        worker = DeliveryWorker(self.backend(run_dir), run_dir)
        worker.run_until_caught_up("finished", give_up_after=GIVE_UP)
        assert worker.caught_up(), worker.last_error
        return worker


HISTOGRAM = Event(1_700_000_000.0, {"h": [1.0, 2.0]}, kind="histogram", namespace="learner", steps={"step": 0})
MISSING_CHECKPOINT = Event(1_700_000_000.0, {"path": "no/such/file.pt", "iteration": 1}, kind="artifact", namespace="ckpt", steps={"step": 0})


def example_values(run_dir: Path) -> list[tuple[int, float]]:
    from rltrack_example_tracker import values

    return values(run_dir.parent / "example.db", KEY)


#: How each registered tracker's store is read back, and the event of a kind it cannot take.
CASES = {
    "mlflow": pytest.param(Tracker("mlflow", mlflow_values, HISTOGRAM), id="mlflow"),
    "trackio": pytest.param(Tracker("trackio", trackio_values, MISSING_CHECKPOINT, {"project": "contract"}), id="trackio"),
    "wandb": pytest.param(Tracker("wandb", wandb_values, MISSING_CHECKPOINT), id="wandb", marks=pytest.mark.slow),
    "neptune": pytest.param(Tracker("neptune", neptune_values, MISSING_CHECKPOINT, one_point_per_step=True), id="neptune", marks=pytest.mark.slow),
    "example": pytest.param(Tracker("example", example_values, HISTOGRAM), id="example-plugin"),
}


def registered_trackers() -> list[str]:
    """The registered backends fed from the journal event by event (not the
    local files, nor the storage mirror, which takes the journal's lines)."""
    names = []
    for name in backend_types():
        cls = backend_class(name)
        if issubclass(cls, RemoteBackend) and not cls.rules.takes_lines:
            names.append(name)
    return names


def test_every_registered_tracker_has_a_contract_case():
    trackers = registered_trackers()
    assert {"mlflow", "wandb", "neptune", "trackio", "example"} <= set(trackers), trackers
    assert sorted(set(trackers) - set(CASES)) == [], "registered trackers without a case in CASES"


@pytest.fixture(params=[CASES[name] for name in registered_trackers() if name in CASES])
def kind(request: pytest.FixtureRequest) -> Tracker:
    return request.param  # type: ignore[no-any-return]


def journal(tmp_path: Path, events: list[Event]) -> Path:
    run_dir = create_run_dir(tmp_path, "run")
    (run_dir / "journal.jsonl").write_text("".join(event.to_json() + "\n" for event in events))
    return run_dir


def test_every_value_arrives_once_in_order_at_its_step(tmp_path, kind):
    run_dir = journal(tmp_path, [scalar(step) for step in range(10)])
    kind.deliver(run_dir)
    assert kind.values(run_dir) == [(step, float(step)) for step in range(10)]


def test_a_delivery_killed_mid_batch_and_resumed_doubles_nothing_and_loses_nothing(tmp_path, kind):
    run_dir = journal(tmp_path, [scalar(step) for step in range(20)])
    first = kind.backend(run_dir)
    killed = DeliveryWorker(first, run_dir)
    assert killed.step() and killed.step(), killed.last_error  # two batches taken: steps 0-7
    events, ids = journal_batch(run_dir)
    first.deliver(events[8:14], ids[8:14])  # a batch and a half more, then the process dies
    first.close("killed")  # what the tracker's client finishes by itself (W&B's wandb-core writes out what it took)
    killed.give_up()  # the cursor stays where the kill left it: before what the tracker holds
    assert killed.cursor.offset < ids[14].offset
    kind.deliver(run_dir)
    assert kind.values(run_dir) == [(step, float(step)) for step in range(20)]


def test_two_equal_events_in_different_batches_both_arrive(tmp_path, kind):
    twin = scalar(3)
    run_dir = journal(tmp_path, [scalar(0), scalar(1), scalar(2), twin, twin, scalar(4)])  # batches: 0-3, 3-4
    kind.deliver(run_dir)
    twins = [(3, 3.0)] if kind.one_point_per_step else [(3, 3.0), (3, 3.0)]
    assert kind.values(run_dir) == [(0, 0.0), (1, 1.0), (2, 2.0), *twins, (4, 4.0)]


def test_what_a_tracker_cannot_take_is_counted_as_dropped(tmp_path, kind):
    run_dir = journal(tmp_path, [scalar(0), kind.refused, Event(1_700_000_001.0, {"x": None}, namespace="learner", steps={"step": 1}), scalar(2)])
    worker = kind.deliver(run_dir)
    assert worker.cursor.report.total("dropped", section=kind.name) == 2  # the refused kind, the None value
    assert kind.values(run_dir) == [(0, 0.0), (2, 2.0)]
