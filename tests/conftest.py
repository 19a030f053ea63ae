"""Fixtures several test modules share."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the whole test session (starting one costs
    seconds). Ray gives its raylet a fixed 30 s to register, which a loaded
    machine can miss: a start that timed out is tried twice more."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = pytest.importorskip("ray")
    for attempt in (1, 2, 3):
        try:
            # address="local": a cluster of the session's own, never one already running on the machine
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
            break
        except Exception as exc:
            ray.shutdown()
            if attempt == 3 or "timed out during startup" not in str(exc):
                raise
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def agent_dir(tmp_path_factory):
    """The test session's own delivery agent directory (tests never talk to a
    user's agent). Its agent stays up a minute between runs, so that tests
    reading the local files after the default `close_timeout` do not pay a
    cold start each; it is stopped when the session ends."""
    directory = tmp_path_factory.mktemp("agent")
    os.environ["RLTRACK_AGENT_DIR"] = str(directory)
    os.environ.setdefault("RLTRACK_AGENT_IDLE", "60")
    yield directory
    import psutil

    for module in ("rltrack.agent_keeper", "rltrack.agent"):  # the keepers first: they would start the agents again
        for process in psutil.process_iter(["cmdline"]):
            if module in (process.info["cmdline"] or []) and any(str(directory) in part for part in process.info["cmdline"]):
                process.terminate()
