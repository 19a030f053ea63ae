"""The delivery agent: one per agent directory for every run of every process,
started by the first logger that needs it, replaced when killed, gone when idle.

Each test has an agent directory of its own (under its RLTRACK_AGENT_DIR), so the
agents it starts, kills and counts are its own. The tracker is
`stand_in_tracker.FileTracker`, which the agent runs like a real one and which
keeps what it receives in the run directory.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from stand_in_tracker import received
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from reliability_helpers import reported
from waiting import wait_until

import rltrack
from rltrack.agent.resources import NICENESS
from rltrack.agent.files import agent_dir, agent_running, ensure_running, read_json, registration_path, registrations, write_private
from rltrack.journal import Counts, ended_with, read_batch
from rltrack.core.report import Report

TRACKER = "stand_in_tracker:FileTracker"
HELPERS = str(Path(__file__).parents[1] / "helpers")  # stand_in_tracker.py, for the writer processes


@pytest.fixture
def agent_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLTRACK_AGENT_DIR", str(tmp_path / "agents"))
    monkeypatch.setenv("RLTRACK_AGENT_IDLE", "2")
    directory = agent_dir()
    yield directory
    for process in agents(directory, "rltrack.agent.keeper") + agents(directory):  # never leave one behind (the keepers first)
        process.kill()


def agents(directory: Path, module: str = "rltrack.agent.process") -> list[psutil.Process]:
    """The live agent processes of `directory` (their command line names it), or its keepers."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if (process.info["cmdline"] or [])[-3:] == ["-m", module, str(directory)] and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def config(root: Path, name: str, **run) -> dict:
    return {"run": {"root": str(root), "name": name, **run}, "backends": {"use": ["local", TRACKER]}}


def journal_values(run_dir: Path) -> list[float]:
    return [event.data["x"] for event in rltrack.read_journal(run_dir) if "x" in event.data]


WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {helpers!r})
    import rltrack
    root, name, records, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    config = {{"run": {{"root": root, "name": name, "close_timeout": 60}}, "backends": {{"use": ["local", {tracker!r}]}}}}
    with rltrack.make_logger(config) as logger:
        for i in range(records):
            logger.write({{"x": float(i)}}, step=i, namespace="collector")
            if i % 50 == 49:
                logger.dump()
            time.sleep(pause)
        logger.flush()
        print("written", flush=True)
        if len(sys.argv) > 5:
            time.sleep(60)  # killed here
    """
).format(helpers=HELPERS, tracker=TRACKER)


def start_writer(root: Path, name: str, records: int, pause: float = 0.0, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(root), name, str(records), str(pause), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.slow
def test_one_agent_serves_the_runs_of_every_process(agent_home, tmp_path):
    writers = [start_writer(tmp_path / "runs", f"run{i}", 300, 0.002) for i in range(4)]
    seen: set[int] = set()

    def ended() -> bool:
        seen.update(process.pid for process in agents(agent_home))
        return all(writer.poll() is not None for writer in writers)

    wait_until(ended, 120, "the four writer processes to end")
    for writer in writers:
        assert writer.returncode == 0, writer.stderr.read()
    assert len(seen) == 1, seen  # one agent, not one per run or per process
    assert (agent_home / "agent.log").read_text().count("serving") == 1
    for i in range(4):
        run_dir = tmp_path / "runs" / f"run{i}"
        assert [e.data["x"] for e in received(run_dir)] == [float(x) for x in range(300)]
        assert pd.read_csv(run_dir / "progress.csv")["collector/x"].tolist() == [float(x) for x in range(300)]
        assert (run_dir / "filetracker.status").read_text() == "finished"


def test_registrations_under_a_root_are_that_roots_runs_alone(agent_home, tmp_path):
    """A sweep waits for its own runs, not for another script's the same agent serves."""
    for key, run_dir in (("a", tmp_path / "sweep" / "trial_0"), ("b", tmp_path / "sweep" / "trial_1"), ("c", tmp_path / "other" / "run")):
        write_private(registration_path(agent_home, key), {"run_dir": str(run_dir.resolve()), "trackers": []})
    assert sorted(registrations(agent_home)) == ["a", "b", "c"]
    assert sorted(registrations(agent_home, under=tmp_path / "sweep")) == ["a", "b"]
    assert sorted(registrations(agent_home, under=tmp_path / "other" / "run")) == ["c"]
    assert registrations(agent_home, under=tmp_path / "swee") == {}  # a path prefix is not a parent directory


RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rltrack.agent.files import agent_dir, ensure_running
    go = Path(sys.argv[1])
    directory = agent_dir()
    (go.parent / ("ready" + sys.argv[2])).touch()
    while not go.exists():
        pass
    print(ensure_running(directory), flush=True)
    """
)


def test_two_processes_starting_the_agent_at_the_same_instant_get_one(agent_home, tmp_path):
    go = tmp_path / "go"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(go), str(i)], stdout=subprocess.PIPE, text=True) for i in range(2)]
    wait_until(lambda: (tmp_path / "ready0").exists() and (tmp_path / "ready1").exists(), 60, "both racers to spin on the file")
    go.touch()
    started = [racer.communicate(timeout=30)[0].strip() for racer in racers]
    assert sorted(started) == ["False", "True"]  # one started it, the other found it running
    assert agent_running(agent_home)
    assert len(agents(agent_home)) == 1
    assert (agent_home / "agent.log").read_text().count("serving") == 1
    assert ensure_running(agent_home) is False


@pytest.mark.slow
@pytest.mark.reliability
def test_an_agent_killed_mid_run_is_replaced_and_nothing_is_lost_or_doubled(agent_home, tmp_path):
    logger = rltrack.make_logger(config(tmp_path / "runs", "killed", close_timeout=600))  # beside busy loops the niced agent delivers the stand-in's 430 batches slowly
    dumps = 0
    for i in range(3000):
        logger.write({"x": float(i)}, step=i, namespace="collector")
        if i % 100 == 99:
            logger.dump()
            dumps += 1
        if i == 1500:
            assert logger.flush(timeout=30)
            pid = read_json(agent_home / "agent.json")["pid"]
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30, f"the killed agent {pid} to exit")
        time.sleep(0.0002)
    assert logger.close()
    assert read_json(agent_home / "agent.json")["pid"] != pid  # the logger started another
    run_dir = logger.run_dir
    expected = [float(i) for i in range(3000)]
    assert journal_values(run_dir) == expected
    assert [e.data["x"] for e in received(run_dir)] == expected  # every value once, in order
    assert pd.read_csv(run_dir / "progress.csv")["collector/x"].tolist() == expected
    accumulator = EventAccumulator(str(run_dir / "log" / "serial"), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert [s.value for s in accumulator.Scalars("collector/x")] == expected
    tables = (run_dir / "log" / "collector" / "collector_logger.txt").read_text()
    assert tables.count("| collector | Value |\n+-----------+-------+\n| x ") >= dumps  # one collector table per dump at least, never cut in two (x is no collection key: a plain table, not DI-engine's 'collect end:')
    report = json.loads((run_dir / "report.json").read_text())
    assert report["counts"]["files.rebuilt"]


@pytest.mark.reliability
def test_a_killed_training_process_is_delivered_and_marked_crashed(agent_home, tmp_path):
    writer = start_writer(tmp_path / "runs", "crash", 400, 0.0, "then-wait")
    assert writer.stdout.readline() == "written\n"
    writer.kill()
    writer.wait()
    run_dir = tmp_path / "runs" / "crash"
    wait_until(lambda: json.loads((run_dir / "meta.json").read_text())["status"] == "crashed", 30, "the run to be marked crashed")
    wait_until(lambda: (run_dir / "filetracker.status").is_file(), 30, "the stand-in tracker's run to end")
    assert (run_dir / "filetracker.status").read_text() == "failed"
    assert [e.data["x"] for e in received(run_dir)] == journal_values(run_dir) == [float(i) for i in range(400)]
    assert pd.read_csv(run_dir / "progress.csv")["collector/x"].tolist() == [float(i) for i in range(400)]


def test_the_agent_picks_up_writers_while_the_descriptors_it_holds_leave_room(tmp_path):
    """Issue 27: the agent's bound is on descriptors held, not on open runs.
    Before, it served (limit - reserve) / 4 writers whatever they held; now
    it counts what it holds: writers that hold nothing (no local files, no
    tracker: their journal is open only while a batch is read) are all
    served, while descriptors held elsewhere leave no room for another."""
    from rltrack.agent import process as agent_module

    directory = tmp_path / "agents"
    (directory / "runs").mkdir(parents=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text("{}")
    registration = {"run_dir": str(run_dir), "name": "run", "pid": os.getpid(), "config": {}, "files": {}, "trackers": {}, "status": None}
    for i in range(5):
        write_private(registration_path(directory, f"w{i}"), {**registration, "writer": f"w{i}"})
    room = 2 * agent_module.FILES_PER_WRITER
    agent = agent_module.Agent(directory, budget=agent_module.open_descriptors(0) + room)

    def scan() -> None:
        agent._scanned_at = 0.0
        agent._scan()

    scan()
    assert (len(agent.writers), agent.queued) == (2, 3)  # room for 2 at once
    scan()
    assert (len(agent.writers), agent.queued) == (4, 1)  # the 2 hold nothing: room for 2 more
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(room)]  # what a writer's local files would hold
    try:
        scan()
        assert (len(agent.writers), agent.queued) == (4, 1)
    finally:
        for fd in held:
            os.close(fd)
    scan()
    assert (len(agent.writers), agent.queued) == (5, 0)


def test_the_agent_reads_a_registration_again_only_when_it_changed(tmp_path, monkeypatch):
    """A sweep's agent looked at each of 64 registrations ten times a second
    (read and parse it, read the process's /proc entry): now an unchanged
    file is not read again, and whether the process lives is checked every
    ALIVE_EVERY seconds, so a crash is still seen within that."""
    from rltrack.agent import process as agent_module

    directory = tmp_path / "agents"
    (directory / "runs").mkdir(parents=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text("{}")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    registration = {"run_dir": str(run_dir), "name": "run", "writer": None, "pid": os.getpid(), "config": {}, "files": {}, "trackers": {}, "status": None}
    write_private(registration_path(directory, "k"), registration)
    reads = []
    monkeypatch.setattr(agent_module, "read_json", lambda path: reads.append(path) or read_json(path))
    agent = agent_module.Agent(directory, budget=1 << 20)

    def scan() -> None:
        agent._scanned_at = 0.0
        agent._scan()

    for _ in range(5):
        scan()
    assert len(reads) == 1 and agent.writers["k"].status is None
    write_private(registration_path(directory, "k"), {**registration, "status": "finished"})
    scan()
    assert len(reads) == 2 and agent.writers["k"].status == "finished"

    write_private(registration_path(directory, "gone"), {**registration, "pid": dead.pid})
    scan()
    assert agent.writers["gone"].status is None  # the last liveness check was less than ALIVE_EVERY ago
    agent._alive_checked_at -= agent_module.ALIVE_EVERY
    scan()
    assert agent.writers["gone"].status == "crashed"


def test_the_agent_exits_after_its_quiet_period_and_its_directory_is_private(agent_home, tmp_path):
    with rltrack.make_logger(config(tmp_path / "runs", "quiet")) as logger:
        logger.write({"x": 1.0}, step=0)
        assert logger.flush(timeout=30)
        status = json.loads(subprocess.run([sys.executable, "-m", "rltrack.cli", "status", "--json"], capture_output=True,
                                           text=True, check=True).stdout)  # fmt: skip
        assert status["running"] and [run["run_dir"] for run in status["runs"]] == [str(logger.run_dir.resolve())]
        assert set(status["runs"][0]["trackers"]) == {TRACKER}
        registrations = list((agent_home / "runs").glob("*.json"))
        assert registrations and all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in registrations)
    assert stat.S_IMODE(agent_home.stat().st_mode) == 0o700
    assert stat.S_IMODE((agent_home / "runs").stat().st_mode) == 0o700
    # A process's memory (its command line in /proc) goes before its files
    # (the lock) as it exits: both must go.
    wait_until(lambda: not agents(agent_home) and not agent_running(agent_home), 15, "the idle agent to exit")  # RLTRACK_AGENT_IDLE=2
    assert list((agent_home / "runs").iterdir()) == []  # nothing left behind


UNREACHABLE = textwrap.dedent(
    """
    import sys
    import rltrack
    close_timeout, records = float(sys.argv[2]), int(sys.argv[3])
    config = {"run": {"root": sys.argv[1], "name": "down", "close_timeout": close_timeout},
              "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": "http://127.0.0.1:9"}}}
    with rltrack.make_logger(config) as logger:
        for i in range(records):
            logger.write({"x": float(i)}, step=i)
        print("closing", flush=True)
    print("closed", flush=True)
    """
)


def test_the_agent_leaves_the_starters_process_tree_but_not_its_session_and_runs_at_its_priority(agent_home, tmp_path):
    """Out of the starter's process tree (Ray kills a worker's children when
    it exits), in a process group of its own (a Ctrl-C for training does not
    reach it), in `/` (its starter's directory can be removed), but in the
    starter's session: where the kernel shares the CPU between sessions first
    (autogroups), an agent in a session of its own took as much CPU as a whole
    Tune sweep (64 trials on 2 cores: 1.28x Tune's wall time, 1.09x in the starter's)."""
    with rltrack.make_logger(config(tmp_path / "runs", "priority")) as logger:
        logger.write({"x": 1.0}, step=0)
        assert logger.flush(timeout=30)
        [agent] = agents(agent_home)
        [keeper] = agents(agent_home, "rltrack.agent.keeper")
        assert agent.ppid() == keeper.pid and keeper.ppid() != os.getpid()  # the keeper's parent exited: it was orphaned
        assert os.getpid() not in [parent.pid for parent in agent.parents()]
        assert os.getsid(agent.pid) == os.getsid(0) and os.getpgid(agent.pid) != os.getpgid(0)
        assert agent.cwd() == "/"
        autogroup = Path("/proc/self/autogroup")
        if autogroup.exists():  # the kernel's CPU share by session: the starter's (both empty where a cgroup, not an autogroup, holds the processes)
            assert Path(f"/proc/{agent.pid}/autogroup").read_text().split()[:1] == autogroup.read_text().split()[:1]
        assert agent.nice() == min(19, os.nice(0) + NICENESS)  # training's own by default (issue 42: trackers show a run while it keeps the cores busy)
        if hasattr(os, "sched_getscheduler"):
            assert os.sched_getscheduler(agent.pid) == os.SCHED_BATCH


def test_a_script_whose_tracker_is_unreachable_exits_and_leaves_the_rest_to_sync(agent_home, tmp_path):
    """The script ends though its tracker never answers (the agent would retry
    it for RLTRACK_AGENT_RETRY, 300 s); how soon after `close_timeout` is a
    figure of bench/bench_outage.py (issue 17: within close_timeout + 1 s), not
    a bound a loaded machine could break here."""
    done = subprocess.run([sys.executable, "-c", UNREACHABLE, str(tmp_path / "runs"), "2", "200"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["closing", "closed"]
    assert f"rltrack sync {tmp_path / 'runs' / 'down'} --to mlflow" in done.stderr
    reported(tmp_path / "runs" / "down", "mlflow.pending")


def test_close_timeout_zero_still_journals_every_record_and_ends_the_run_finished(agent_home, tmp_path, monkeypatch):
    """`close_timeout = 0` bounds the wait for the trackers, not the run's own
    journal: a burst written just before the end is all in the journal, and
    the run ends finished, not crashed (before: close(0) left the pipeline
    thread no time; 1 of 6 such scripts had an empty journal, 4 of 6 ended crashed)."""
    records = 20_000
    monkeypatch.setenv("RLTRACK_AGENT_RETRY", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the client's own retries (backing off for tens of seconds) would hold the agent's give-up
    done = subprocess.run([sys.executable, "-c", UNREACHABLE, str(tmp_path / "runs"), "0", str(records)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "runs" / "down"
    assert journal_values(run_dir) == [float(i) for i in range(records)]
    assert ended_with(run_dir / "journal.jsonl") == "finished"  # the agent writes it into meta.json
    meta = run_dir / "meta.json"  # the agent is another one than agent_home's: MLFLOW_* variables are part of its key
    wait_until(lambda: json.loads(meta.read_text())["status"] != "running", 120, "the agent to mark the run ended in meta.json")
    assert json.loads(meta.read_text())["status"] == "finished"


def test_the_agent_alone_writes_report_json_and_the_runs_end_from_the_journals_control_lines(agent_home, tmp_path):
    """The training process journals its counts (at a flush, and at close) and
    its final status; the agent adds the counts to report.json and writes
    the status into meta.json, and the journal says the same."""
    logger = rltrack.make_logger(config(tmp_path / "runs", "facts", close_timeout=60))
    logger.write({"x": 1.0, "bad": object()}, step=0)
    assert logger.flush(timeout=60)
    for i in range(1, 4):
        logger.write({"x": float(i), "bad": object(), 2: 1.0}, step=i)
    assert logger.close(status="killed")
    run_dir = logger.run_dir
    lines = [entry.counts for entry in read_batch(run_dir / "journal.jsonl", 0, 10_000)[0] if type(entry) is Counts]
    assert lines[0]["counts"]["core.dropped"] == {"bad: no numeric conversion for object": 1}  # journaled at the flush
    journaled = Report()
    for counts in lines:
        journaled.add(counts)
    assert journaled.as_dict()["counts"]["core.dropped"] == {"bad: no numeric conversion for object": 4}
    assert journaled.as_dict()["renamed"] == {"core": {"2 (int)": "2"}}
    saved = json.loads((run_dir / "report.json").read_text())
    assert saved["counts"]["core.dropped"] == {"bad: no numeric conversion for object": 4}
    assert saved["renamed"]["core"] == {"2 (int)": "2"}
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "killed" and meta["end_time"] is not None
    assert ended_with(run_dir / "journal.jsonl") == "killed"
    assert logger.report.as_dict()["counts"]["core.dropped"] == {"bad: no numeric conversion for object": 4}  # read back from report.json


def test_acme_task_instances_arrive_at_the_tracker_as_distinct_workers(agent_home, tmp_path):
    """Events carry their worker through the journal to the agent (the
    per-logger delivery child once lost it: every instance arrived as "0")."""
    from rltrack.adapters.acme import RLTrackLogger

    logger = rltrack.make_logger(config(tmp_path / "runs", "acme", close_timeout=60))
    actors = [RLTrackLogger(logger, "actor", "actor_steps", task_instance=i) for i in range(3)]
    for step in range(5):
        for actor in actors:
            actor.write({"actor_steps": step, "episode_return": float(step)})
    assert logger.close()
    workers = [event.worker for event in received(logger.run_dir) if event.namespace == "actor"]  # Acme's label, as written (its stage: collector)
    assert sorted(set(workers)) == ["0", "1", "2"] and len(workers) == 15


def test_a_slow_tracker_with_a_backlog_is_not_given_up_after_the_run_ends(agent_home, tmp_path, monkeypatch):
    """`RLTRACK_AGENT_RETRY` bounds how long a *failing* tracker is retried
    after its run's end. A tracker that takes every batch, only slowly (or a
    lane with many runs queued, as in a 256-trial sweep), is served to the
    end: before, the agent gave up every tracker of a run RETRY seconds after
    its end, delivered or not, and runs of a large sweep never reached MLflow."""
    monkeypatch.setenv("RLTRACK_AGENT_RETRY", "1")
    settings = {"use": ["local", TRACKER], TRACKER: {"delay": 0.1}}  # 200 records in batches of 7: ~3 s of delivery
    with rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "slow", "close_timeout": 0}, "backends": settings}) as logger:
        for i in range(200):
            logger.write({"x": float(i)}, step=i)
    wait_until(lambda: not agents(agent_home), 120, "the agent to finish the run and exit")
    assert [e.data["x"] for e in received(logger.run_dir)] == [float(i) for i in range(200)]
    assert (logger.run_dir / "filetracker.status").read_text() == "finished"
