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
    seconds), started again while its start times out (see ray_start.py)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = pytest.importorskip("ray")
    from ray_start import start_ray

    # address="local": a cluster of the session's own, never one already running on the machine
    start_ray(lambda: ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True))
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
