"""A record the local files refuse never stops them: left out, counted with its place, the rest written once, in order.

A journal written otherwise than by rltrack's logger (an importer, another
tool, a line edited by hand) may hold what the files cannot hold: a string,
list or dict among scalars, a histogram that is no list of numbers, a time
that names no date. Tried on the real sinks (progress.csv, the text logs,
TensorBoard), each stopped the files in the middle of a batch. These tests
feed such a journal to the real `FilesDelivery` with the local and
TensorBoard backends and read every file back (pandas, TensorBoard's
EventAccumulator): first with the rules applied before writing
(rltrack.sinks.writable), then without them, so that the sinks themselves
refuse and the batch is split down to the refused records
(rltrack.core.refusals.split_refused).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import rltrack.delivery.files as files_delivery
from rltrack.core.events import Event
from rltrack.core.refusals import encodable
from rltrack.core.report import Report
from rltrack.core.turns import Faults
from rltrack.delivery.files import FilesDelivery
from rltrack.journal import read_batch
from rltrack.journal.feed import Batch
from rltrack.sinks.base import RunContext
from rltrack.sinks.local import LocalBackend
from rltrack.sinks.rundir import create_run_dir
from rltrack.sinks.tensorboard import TensorBoardBackend

VALUES = 60
#: index -> a poisoned record written before value `index`, and what the files say of it
POISON = {
    10: (Event(1010.0, {"x": "text", "y": 5.0}, steps={"step": 10}), "scalars value"),
    20: (Event(1020.0, {"h": [1.0, "a"]}, kind="histogram", steps={"step": 20}), "histogram value"),
    30: (Event(1030.0, {"h": 3.0}, kind="histogram", steps={"step": 30}), "histogram value"),
    40: (Event(1040.0, {"x": {"in": 1}}, steps={"step": 40}), "scalars value"),
    50: (Event(float("nan"), {"x": 1000.0}, steps={"step": 50}), "scalars event"),
}


def journal(run_dir: Path) -> list[int]:
    """Writes the journal: `x` = 0..VALUES-1 at time 1000+i, a poisoned record before each of POISON;
    returns the offset after each poisoned line."""
    lines, places, size = [], [], 0
    for i in range(VALUES):
        if i in POISON:
            line = POISON[i][0].to_line()
            size += len(line)
            lines.append(line)
            places.append(size)
        line = Event(1000.0 + i, {"x": float(i)}, steps={"step": i}).to_line()
        size += len(line)
        lines.append(line)
    (run_dir / "journal.jsonl").write_bytes(b"".join(lines))
    return places


def deliver(tmp_path: Path) -> tuple[Path, list[int], dict, list[str]]:
    run_dir = create_run_dir(tmp_path, "run")
    places = journal(run_dir)
    report, told = Report(), []
    context = RunContext(run_dir, "run", {}, report)
    delivery = FilesDelivery(context, [LocalBackend(), TensorBoardBackend()], Faults(report, told.append))
    ends: list[int] = []
    entries, end = read_batch(run_dir / "journal.jsonl", 0, 10_000, None, ends)
    delivery.take(Batch(0, end, entries, ends, []))
    assert delivery.flush() and delivery.close("finished")
    return run_dir, places, report.as_dict()["counts"], told


def scalars(folder: Path, tag: str) -> list[float]:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [s.value for s in accumulator.Scalars(tag)]


def assert_every_value_once(run_dir: Path, tmp_path: Path) -> None:
    expected = [float(i) for i in range(VALUES)]
    assert pd.read_csv(run_dir / "progress.csv")["x"].dropna().tolist() == expected
    assert scalars(run_dir / "log" / "serial", "x") == expected
    assert scalars(tmp_path / "tensorboard" / "run", "x") == expected
    log = (run_dir / "log" / "main" / "main_logger.txt").read_text()
    assert "| x " in log and "1000" not in log  # the text logs' tables are written, the refused record's value is not


def test_what_the_files_cannot_hold_is_left_out_before_writing_and_counted_with_its_place(tmp_path):
    run_dir, places, counts, told = deliver(tmp_path)
    assert_every_value_once(run_dir, tmp_path)
    assert pd.read_csv(run_dir / "progress.csv")["y"].dropna().tolist() == [5.0]  # the poisoned record's other value is kept
    refused = counts["files.refused"]
    assert sum(refused.values()) == len(POISON) and all(count == 1 for count in refused.values())
    for (_, what), place in zip(POISON.values(), places):
        (reason,) = [reason for reason in refused if reason.endswith(f"journal.jsonl line ending at byte {place}")]
        assert reason.startswith(what), reason
    assert "errors" not in json.dumps(counts) and not told


def test_a_batch_a_sink_refuses_is_split_down_to_the_refused_records_and_the_rest_written_once(tmp_path, monkeypatch):
    """Without the rules applied before writing (only text with no UTF-8
    form and times that name no date left out), the real sinks refuse the
    poisoned records themselves: each sink's batch is written again in
    halves, and a sink that refused a half holds nothing of it."""
    monkeypatch.setattr(files_delivery, "writable", encodable)
    run_dir, places, counts, told = deliver(tmp_path)
    assert_every_value_once(run_dir, tmp_path)
    refused = counts["files.refused"]
    by_place = {place: [reason for reason in refused if reason.endswith(f"byte {place}")] for place in places}
    for place in places[:4]:  # each refused by both sinks (TensorBoard's writer is part of the local backend too)
        assert sorted(reason.split(":")[0] for reason in by_place[place]) == ["refused by local", "refused by tensorboard"], refused
    assert [reason.startswith("scalars event: its time nan") for reason in by_place[places[4]]] == [True]
    assert "errors" not in json.dumps(counts) and not told


@pytest.mark.parametrize("sink", [LocalBackend, TensorBoardBackend])
def test_a_write_a_sink_refuses_leaves_nothing_of_its_batch(tmp_path, sink):
    run_dir = create_run_dir(tmp_path, "run")
    backend = sink()
    backend.open(RunContext(run_dir, "run", {}, Report()))
    backend.write([Event(1.0, {"x": 0.0}, steps={"step": 0})])
    with pytest.raises(TypeError):
        backend.write([Event(2.0, {"x": 1.0}, steps={"step": 1}), Event(2.0, {"x": "poison"}, steps={"step": 1})])
    backend.write([Event(3.0, {"x": 2.0}, steps={"step": 2})])
    backend.close("finished")
    folder = run_dir / "log" / "serial" if sink is LocalBackend else tmp_path / "tensorboard" / "run"
    assert scalars(folder, "x") == [0.0, 2.0]
    if sink is LocalBackend:
        assert pd.read_csv(run_dir / "progress.csv")["x"].tolist() == [0.0, 2.0]
