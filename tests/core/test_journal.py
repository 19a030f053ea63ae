"""The journal: events round-trip through JSON lines, a killed writer's torn
last line is tolerated (and cleaned up before the next append), any other bad
line is an error naming file:line."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rltrack
from rltrack.core.events import SCHEMA_VERSION, Event
from rltrack.journal import JOURNAL_NAME, JournalWriter, control_line, count_skipped, ended_with, read_batch, read_journal
from rltrack.core.report import Report
from growing_files import whole_lines
from waiting import wait_until


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLTRACK_CONFIG", raising=False)
    monkeypatch.delenv("RLTRACK_BACKENDS", raising=False)


def same(a, b):
    """Equality where nan equals nan (the journal keeps non-finite floats)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def random_events(n, seed=0):
    rng = np.random.default_rng(seed)
    kinds = ["scalars", "text", "histogram", "timing", "hparams"]
    events = []
    for i in range(n):
        kind = kinds[int(rng.integers(len(kinds)))]
        if kind == "text":
            data = {"msg": f"épisode {i} ✓"}
        elif kind == "histogram":
            data = {"acts": rng.normal(size=4).tolist()}
        elif kind == "hparams":
            data = {"lr": 1e-3, "net": {"sizes": [64, 64]}, "env": "CartPole-v1"}
        else:
            data = {"loss": float(rng.normal()), "count": int(rng.integers(1 << 40)), "none": None}
        events.append(
            Event(
                time=1.7e9 + i * 0.001,
                data=data,
                kind=kind,
                namespace=["", "collector", "learner"][i % 3],
                steps={"env_steps": 2048 * i, "train_iter": i},
                source="sb3",
                worker=str(i % 4),
                run="cartpole",
                preaggregated=bool(i % 2),
            )
        )
    return events


def write_journal(path, events):
    writer = JournalWriter(path)
    writer.append(events)
    writer.close()
    return path


# ---- round trip ----------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    time_=st.floats(allow_nan=False, allow_infinity=False),
    data=st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)), max_size=6),
    kind=st.sampled_from(rltrack.core.events.KINDS),
    namespace=st.text(max_size=8),
    steps=st.dictionaries(st.text(min_size=1, max_size=6), st.integers(-(2**62), 2**62), max_size=3),
    worker=st.text(max_size=4),
    preaggregated=st.booleans(),
)
def test_event_json_round_trip(time_, data, kind, namespace, steps, worker, preaggregated):
    event = Event(time=time_, data=data, kind=kind, namespace=namespace, steps=steps, worker=worker, preaggregated=preaggregated)
    line = event.to_json()
    assert "\n" not in line  # one event, one line
    back = Event.from_json(line)
    assert back.time == event.time and back.kind == kind and back.namespace == namespace
    assert back.steps == steps and list(back.steps) == list(steps)  # the first axis stays the primary one
    assert back.worker == worker and back.preaggregated is preaggregated and back.schema == SCHEMA_VERSION
    assert same(back.data, data)


@settings(max_examples=300, deadline=None)
@given(
    time_=st.one_of(st.floats(), st.integers(0, 2**40)),
    data=st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4), st.builds(np.float64, st.floats())),
        max_size=8,
    ),
    kind=st.sampled_from(rltrack.core.events.NUMERIC_KINDS),
    fields=st.tuples(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6), st.text(max_size=4)),
    steps=st.dictionaries(st.text(min_size=1, max_size=6), st.integers(-(2**70), 2**70), max_size=3),
    preaggregated=st.booleans(),
    schema=st.integers(0, SCHEMA_VERSION),
)
def test_scalars_lines_are_the_json_of_to_dict(time_, data, kind, fields, steps, preaggregated, schema):
    """Lines are encoded by orjson where it writes what json would (see
    `Event.to_json`), else by json: either way the line is one line of ASCII
    and reads back as exactly what `json.dumps` makes of `to_dict()` with the
    journal's options (numpy floats as numbers, NaN as NaN, keys in order)."""
    run, source, namespace, worker = fields
    event = Event(time_, data, kind, namespace, steps, source, worker, run, preaggregated, schema)
    line = event.to_json()
    assert line.isascii() and "\n" not in line
    expected = json.loads(json.dumps(event.to_dict(), separators=(",", ":"), default=repr))
    back = json.loads(line)
    assert list(back) == list(expected) and list(back["data"]) == list(expected["data"])
    assert same(back, expected)


def test_non_finite_floats_survive_the_journal():
    event = Event(time=1.0, data={"a": math.nan, "b": math.inf, "c": -math.inf})
    back = Event.from_json(event.to_json())
    assert math.isnan(back.data["a"]) and back.data["b"] == math.inf and back.data["c"] == -math.inf


def test_missing_optional_fields_take_their_defaults():
    event = Event.from_json('{"time": 2.5}')
    assert (event.time, event.data, event.kind, event.namespace, event.steps) == (2.5, {}, "scalars", "", {})
    assert (event.source, event.worker, event.run, event.preaggregated, event.stage) == ("api", "0", "", False, "")


def test_a_stage_is_written_only_when_set_and_files_the_values_under_it():
    """The key as written (`charts/episodic_return`) and the stage the local layout files it under."""
    filed = Event(time=1.0, data={"episodic_return": 9.0}, namespace="charts", stage="collector")
    back = Event.from_json(filed.to_json())
    assert (back.namespace, back.stage, back.filed_under) == ("charts", "collector", "collector")
    assert back.filed_data() == {"charts/episodic_return": 9.0} and back.tag("episodic_return") == "charts/episodic_return"
    assert back.derive({"episodic_return": 1.0}).stage == "collector"  # filters keep it
    plain = Event(time=1.0, data={"reward_mean": 9.0}, namespace="collector")
    assert "stage" not in json.loads(plain.to_json()) and plain.filed_data() is plain.data and plain.filed_under == "collector"


def test_writer_and_reader_round_trip(tmp_path):
    events = random_events(200)
    path = write_journal(tmp_path / JOURNAL_NAME, events)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200 and all(json.loads(line)["schema"] == SCHEMA_VERSION for line in lines)
    for read in (read_journal(path), read_journal(tmp_path), read_journal(str(tmp_path))):
        assert [e.to_dict() for e in read] == [e.to_dict() for e in events]


# ---- torn last line ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_torn_last_line_is_skipped(tmp_path, seed):
    events = random_events(30, seed)
    path = write_journal(tmp_path / JOURNAL_NAME, events)
    raw = path.read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(raw) if b == ord("\n")][:-1]
    rng = np.random.default_rng(seed)
    line = int(rng.integers(1, 30))  # cut inside line number `line` (0-based), short of its newline
    cut = int(rng.integers(starts[line] + 1, starts[line + 1] - 1))
    path.write_bytes(raw[:cut])
    assert [e.to_dict() for e in read_journal(path)] == [e.to_dict() for e in events[:line]]


def test_unterminated_but_complete_last_line_is_read(tmp_path):
    events = random_events(3)
    path = write_journal(tmp_path / JOURNAL_NAME, events)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    assert len(list(read_journal(path))) == 3


def test_appending_after_a_torn_line_starts_a_clean_line(tmp_path):
    events = random_events(6)
    path = write_journal(tmp_path / JOURNAL_NAME, events[:3])
    path.write_bytes(path.read_bytes() + events[3].to_json()[:25].encode())  # killed mid-line
    write_journal(path, events[4:])  # a new writer (resume, sync) appends
    assert [e.to_dict() for e in read_journal(path)] == [e.to_dict() for e in events[:3] + events[4:]]


def test_appending_after_a_complete_unterminated_line_keeps_it(tmp_path):
    events = random_events(5)
    path = write_journal(tmp_path / JOURNAL_NAME, events[:3])
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # killed between the JSON and its newline
    write_journal(path, events[3:])
    assert [e.to_dict() for e in read_journal(path)] == [e.to_dict() for e in events]


def test_a_torn_first_line_leaves_an_empty_journal(tmp_path):
    path = tmp_path / JOURNAL_NAME
    path.write_text('{"schema": 1, "ti')
    assert list(read_journal(path)) == []
    write_journal(path, random_events(2))
    assert len(list(read_journal(path))) == 2


WRITER = """
import sys
from pathlib import Path
from rltrack.core.events import Event
from rltrack.journal import JournalWriter
writer = JournalWriter(Path(sys.argv[1]))
i = 0
while True:
    writer.append([Event(time=float(i), data={"i": i, "pad": "x" * (i % 5000)}, steps={"step": i})])
    if i % 7 == 0:
        writer.flush()
    i += 1
"""


def test_a_writer_killed_mid_run_leaves_a_readable_journal(tmp_path):
    path = tmp_path / JOURNAL_NAME
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=Path(rltrack.__file__).parent.parent)
    try:

        def written() -> bool:
            assert child.poll() is None, "the writer died on its own"
            return path.exists() and path.stat().st_size >= 2_000_000

        wait_until(written, 60, "the writer to write 2 MB", every=0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    events = list(read_journal(path))
    assert len(events) > 100
    assert [e.data["i"] for e in events] == list(range(len(events)))
    assert all(e.data["pad"] == "x" * (e.data["i"] % 5000) for e in events)


# ---- bad lines -----------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["not json at all", "[1, 2]", "123", '{"data": {}}', '{"time": null}', '{"time": "noon"}', '{"time": 1, "steps": {"a": "x"}}', '{"time": 1, "data": [1]}'],
)
def test_a_bad_line_in_the_middle_is_skipped_and_counted_by_every_reader(tmp_path, bad):
    """Damage anywhere in a journal costs its reader that line only: the
    agent died on such a line and delivered nothing after it (issue 27)."""
    events = random_events(4)
    lines = [e.to_json() for e in events]
    path = tmp_path / JOURNAL_NAME
    path.write_text("\n".join(lines[:2] + [bad] + lines[2:]) + "\n")
    told = []
    read = list(read_journal(path, on_bad=lambda file, offset, reason: told.append((file, offset, reason))))
    assert [e.to_dict() for e in read] == [e.to_dict() for e in events]
    offset = len(lines[0]) + len(lines[1]) + 2
    assert [(file, at) for file, at, _ in told] == [(path, offset)] and told[0][2].startswith("not a journal line")
    with pytest.warns(RuntimeWarning, match=rf"{path}: 1 lines skipped .*first at byte {offset}"):
        assert len(list(read_journal(tmp_path))) == 4
    report = Report()
    entries, end = read_batch(path, 0, 100, count_skipped(report, "mlflow"))
    assert [e.to_dict() for e in entries] == [e.to_dict() for e in events] and end == path.stat().st_size
    assert report.as_dict()["counts"]["mlflow.unparsable"] == {"journal.jsonl: lines that are not journal lines, skipped": 1}


def test_a_bad_complete_last_line_is_skipped_and_counted_too(tmp_path):
    path = write_journal(tmp_path / JOURNAL_NAME, random_events(2))
    with path.open("a") as f:
        f.write("garbage\n")  # terminated: not a crash, something else damaged the file
    told = []
    assert len(list(read_journal(path, on_bad=lambda *bad: told.append(bad)))) == 2
    assert len(told) == 1


def test_a_newer_schema_says_to_upgrade(tmp_path):
    path = tmp_path / JOURNAL_NAME
    path.write_text(json.dumps({"schema": SCHEMA_VERSION + 1, "time": 1.0}) + "\n")
    with pytest.raises(ValueError, match=rf"{path}:1: .*newer than this rltrack understands.*upgrade rltrack"):
        list(read_journal(path))


def test_blank_lines_are_skipped(tmp_path):
    events = random_events(3)
    path = tmp_path / JOURNAL_NAME
    path.write_text("\n" + "\n\n".join(e.to_json() for e in events) + "\n\n")
    assert [e.to_dict() for e in read_journal(path)] == [e.to_dict() for e in events]


# ---- the journal of a live run ---------------------------------------------------


def test_a_run_journal_holds_every_event_and_reaches_the_disk_without_flush_or_close(tmp_path):
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "j"}, "backends": {"use": ["memory"]}})
    path = logger.run_dir / JOURNAL_NAME
    for i in range(20):
        logger.write({"reward": float(i)}, step={"env_steps": 100 * i, "train_iter": i}, namespace="collector")
    logger.log_text("note", "hello", step=3)
    # no flush(), no close(): the pipeline's own periodic flush (every 0.5 s; how soon is not
    # bounded here: a loaded machine may not give the pipeline thread the CPU for seconds)
    wait_until(lambda: len(whole_lines(path)) >= 21, 30, "the pipeline's periodic flush of the journal")  # the pipeline thread may be mid-line
    assert len(whole_lines(path)) == 21
    assert logger.close(timeout=10)
    journal = list(read_journal(logger.run_dir))
    assert [e.to_dict() for e in journal] == [e.to_dict() for e in logger.backends["memory"].events]
    scalars = [e for e in journal if e.kind == "scalars"]
    assert [e.data for e in scalars] == [{"reward": float(i)} for i in range(20)]
    assert [e.steps for e in scalars] == [{"env_steps": 100 * i, "train_iter": i} for i in range(20)]
    assert all(e.namespace == "collector" and e.run == logger.run_dir.name for e in scalars)
    assert [(e.kind, e.data, e.steps) for e in journal if e.kind == "text"] == [("text", {"note": "hello"}, {"step": 3})]


# ---- control lines: counts and the end ---------------------------------------------


def test_counts_and_end_lines_are_read_past_by_readers_and_given_to_deliveries(tmp_path):
    events = random_events(6)
    path = tmp_path / JOURNAL_NAME
    writer = JournalWriter(path)
    counts = {"counts": {"core.dropped": {"bad: no numeric conversion for object": 2}}, "renamed": {"core": {"2 (int)": "2"}}}
    writer.append(events[:3])
    writer.append_control(control_line("counts", 1.5, counts=counts))
    writer.append(events[3:])
    writer.append_control(control_line("end", 2.5, status="killed"))
    writer.close()
    assert [e.to_dict() for e in read_journal(path)] == [e.to_dict() for e in events]
    entries, offset = read_batch(path, 0, 100)
    assert offset == path.stat().st_size
    assert [type(entry).__name__ for entry in entries] == ["Event"] * 3 + ["Counts"] + ["Event"] * 3 + ["End"]
    assert entries[3].counts == counts and entries[3].time == 1.5
    assert (entries[-1].status, entries[-1].time) == ("killed", 2.5)
    assert ended_with(path) == "killed"


def test_a_journal_without_an_end_line_has_no_final_status(tmp_path):
    path = write_journal(tmp_path / JOURNAL_NAME, random_events(3))  # as written before end lines, or by a writer still running
    assert ended_with(path) is None
    with path.open("ab") as f:
        f.write(control_line("end", 1.0, status="finished")[:-3])  # torn by a crash
    assert ended_with(path) is None
    assert ended_with(tmp_path / "absent.jsonl") is None


def test_report_untold_gives_what_was_counted_since_it_last_told_and_keeps_everything():
    report = Report()
    assert report.untold() is None
    report.count("dropped", "a", 2)
    report.rename("core", "x y", "x_y")
    assert report.untold() == {"counts": {"core.dropped": {"a": 2}}, "renamed": {"core": {"x y": "x_y"}}}
    assert report.untold() is None
    report.count("dropped", "a")
    report.count("converted", "b", section="sb3")
    report.rename("core", "x y", "x_y")  # the same rename again: nothing new
    assert report.untold() == {"counts": {"core.dropped": {"a": 1}, "sb3.converted": {"b": 1}}, "renamed": {}}
    assert report.as_dict() == {"counts": {"core.dropped": {"a": 3}, "sb3.converted": {"b": 1}}, "renamed": {"core": {"x y": "x_y"}}}


def test_report_take_leaves_the_sections_asked_for():
    report = Report()
    report.count("dropped", "a")
    report.count("unparsable", "b", section="mlflow")
    report.rename("mlflow", "x y", "x_y")
    assert report.take(leave={"mlflow"}) == {"counts": {"core.dropped": {"a": 1}}, "renamed": {}}
    assert report.take() == {"counts": {"mlflow.unparsable": {"b": 1}}, "renamed": {"mlflow": {"x y": "x_y"}}}
    assert report.take() == {"counts": {}, "renamed": {}}


def test_a_control_line_a_later_rltrack_added_is_passed_by_and_a_newer_schema_says_upgrade(tmp_path):
    """The contract of docs/journal-schema.md: an unknown control name at this
    schema is read past (not counted as damage); a line of a newer schema is refused, naming the fix."""
    from rltrack.core.events import NewerSchemaError

    events = random_events(4)
    path = tmp_path / JOURNAL_NAME
    writer = JournalWriter(path)
    writer.append(events[:2])
    writer.append_control(control_line("checkpoint_uploaded", 1.5, path="ckpt/iteration_1.pth.tar"))
    writer.append(events[2:])
    writer.close()
    report = Report()
    assert [e.to_dict() for e in read_journal(path, count_skipped(report, "reader"))] == [e.to_dict() for e in events]
    assert report.as_dict()["counts"] == {}
    entries, _ = read_batch(path, 0, 100)
    assert [type(entry).__name__ for entry in entries] == ["Event", "Event", "OtherControl", "Event", "Event"]
    with path.open("ab") as f:
        f.write(json.dumps({"schema": SCHEMA_VERSION + 1, "control": "dump", "time": 3.0}).encode() + b"\n")
    with pytest.raises(NewerSchemaError, match="upgrade rltrack"):
        read_batch(path, 0, 100)
