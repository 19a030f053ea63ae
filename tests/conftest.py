"""Fixtures several test modules share."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items):
    """A test that starts Ray (the `ray_cluster` fixture) is `slow`: the
    first one pays the cluster's start (25 s on a loaded machine), and each
    runs real Ray workers. `make test-fast` (-m "not slow") leaves them out."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the whole test session (starting one costs
    seconds). Ray gives its raylet a fixed 30 s to register, which a loaded
    machine can miss: a start that timed out is tried twice more, once the
    processes of the failed start are gone (`ray.shutdown` does not know a
    head whose start failed: its GCS server and raylet ran on beside the next)."""
    import psutil

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = pytest.importorskip("ray")
    for attempt in (1, 2, 3):
        ours = {child.pid for child in psutil.Process().children(recursive=True)}
        try:
            # address="local": a cluster of the session's own, never one already running on the machine
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
            break
        except Exception as exc:
            ray.shutdown()
            started = [child for child in psutil.Process().children(recursive=True) if child.pid not in ours]
            for child in started:
                child.kill()
            psutil.wait_procs(started, timeout=30)
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

    for module in ("rltrack.agent.keeper", "rltrack.agent.process"):  # the keepers first: they would start the agents again
        for process in psutil.process_iter(["cmdline"]):
            if module in (process.info["cmdline"] or []) and any(str(directory) in part for part in process.info["cmdline"]):
                process.terminate()
