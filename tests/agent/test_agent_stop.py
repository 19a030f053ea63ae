"""The agent's life is visible and stoppable (issue 42).

`rltrack status` says that the agent exits by itself after its quiet period
and how to stop it; `rltrack agent stop` ends the agent and its keeper after
the agent has stored what it holds, `--now` at once; a SIGTERM to the keeper
ends the agent too (before, the agent ran on until it went idle). In each
case the training that was writing goes on: its logger starts another
agent, and every value arrives once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
from pathlib import Path

import psutil
import pytest
from reliability_helpers import PYTHON, child_env, mlflow_history
from waiting import wait_until

from rltrack.delivery.cursor import cursor_path

VALUES = 100
WRITER = textwrap.dedent(
    f"""
    import sys, time
    from pathlib import Path
    import rltrack
    home = Path(sys.argv[1])
    logger = rltrack.make_logger({{"run": {{"root": str(home / "runs"), "name": "r"}}, "backends": {{"use": ["local", "mlflow"]}}}})
    for step in range({VALUES}):
        logger.write({{"x": float(step)}}, step=step)
    logger.flush()
    (home / "halfway").touch()
    while not (home / "go").exists():
        time.sleep(0.05)
    for step in range({VALUES}, {2 * VALUES}):
        logger.write({{"x": float(step)}}, step=step)
    print("closed", logger.close(timeout=None))
    """
)


def environment(home: Path) -> dict[str, str]:
    return child_env(home, RLTRACK_AGENT_DIR=str(home / "agents"), RLTRACK_AGENT_IDLE="60")


def rltrack_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "rltrack.cli", *args], capture_output=True, text=True, env=environment(home), cwd=home, timeout=300)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # an orphan waiting for a PID 1 that does not reap
    except psutil.NoSuchProcess:
        return True


def agent_info(home: Path) -> dict:
    (info,) = [json.loads(path.read_text()) for path in (home / "agents").glob("*/agent.json")]
    return info


@pytest.fixture
def writing(tmp_path: Path):
    """A training half way through: its logger holds a run open, the agent serves it."""
    writer = subprocess.Popen([PYTHON, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(tmp_path))
    try:
        wait_until(lambda: (tmp_path / "halfway").exists() or writer.poll() is not None, 300, "the writer to write its first values")
        assert writer.poll() is None, writer.communicate()
        wait_until(lambda: list((tmp_path / "agents").glob("*/agent.json")), 120, "the agent to start")
        yield tmp_path, writer
    finally:
        (tmp_path / "go").touch()
        try:
            writer.wait(300)
        finally:
            if writer.poll() is None:
                writer.kill()
        info = agent_info(tmp_path)
        for pid in (info.get("keeper"), info["pid"]):
            if pid and not gone(pid):
                psutil.Process(pid).kill()


def finishes_with_every_value_once(home: Path, writer: subprocess.Popen) -> None:
    (home / "go").touch()
    out, err = writer.communicate(timeout=600)
    assert writer.returncode == 0 and "closed True" in out, err
    assert mlflow_history(home / "runs" / "r", "x") == [(step, float(step)) for step in range(2 * VALUES)]


def test_status_says_how_the_agent_ends_and_how_to_stop_it(writing) -> None:
    home, _ = writing
    shown = rltrack_cli(home, "status")
    assert "exits by itself after 60 s with nothing to serve" in shown.stdout and "rltrack agent stop" in shown.stdout, shown.stdout
    assert json.loads(rltrack_cli(home, "status", "--json").stdout)["stop"].startswith("rltrack agent stop")


@pytest.mark.slow
def test_agent_stop_ends_the_pair_after_storing_what_it_holds(writing) -> None:
    home, writer = writing
    info = agent_info(home)
    done = rltrack_cli(home, "agent", "stop")
    assert done.returncode == 0 and f"agent {info['pid']} stopped after storing what it held" in done.stdout, done.stdout + done.stderr
    assert gone(info["pid"]) and gone(info["keeper"])
    log = next((home / "agents").glob("*/agent.log")).read_text()
    assert f"rltrack agent {info['pid']}: stopped (SIGTERM)" in log, log
    cursor = cursor_path(home / "runs" / "r", "mlflow")
    delivered = json.loads(cursor.read_text()).get("delivered", 0) if cursor.exists() else 0
    if delivered:  # what the store holds is what its cursor covers: nothing taken and left unstored
        assert len(mlflow_history(home / "runs" / "r", "x")) == delivered
    finishes_with_every_value_once(home, writer)


@pytest.mark.slow
def test_agent_stop_now_ends_the_pair_at_once(writing) -> None:
    home, writer = writing
    info = agent_info(home)
    done = rltrack_cli(home, "agent", "stop", "--now")
    assert done.returncode == 0 and f"agent {info['pid']} stopped at once" in done.stdout, done.stdout + done.stderr
    assert gone(info["pid"]) and gone(info["keeper"])
    finishes_with_every_value_once(home, writer)


@pytest.mark.slow
def test_sigterm_to_the_keeper_ends_its_agent_too(writing) -> None:
    home, writer = writing
    info = agent_info(home)
    psutil.Process(info["keeper"]).send_signal(signal.SIGTERM)
    wait_until(lambda: gone(info["pid"]) and gone(info["keeper"]), 120, "the keeper and its agent to end")
    assert f"rltrack agent {info['pid']}: stopped (SIGTERM)" in next((home / "agents").glob("*/agent.log")).read_text()
    finishes_with_every_value_once(home, writer)
