"""Starting Ray on a loaded machine: the session's cluster (tests/conftest.py)
and the two-node clusters tests start in a child process.

Ray gives its raylet a fixed 30 s to register, which a loaded machine can
miss: a start that timed out is tried twice more, once the processes of the
failed start are gone (`ray.shutdown` does not know a head whose start
failed: its GCS server and raylet ran on beside the next).
"""

from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")
#: What Ray says when a node did not start in its time (not a fault of the test).
SLOW_START = ("timed out during startup", "The node registration may not be complete yet")


def start_ray(start: Callable[[], T]) -> T:
    """`start()` (a `ray.init`, a `Cluster`), tried up to three times while it times out."""
    import psutil
    import ray

    for attempt in (1, 2, 3):
        ours = {child.pid for child in psutil.Process().children(recursive=True)}
        try:
            return start()
        except Exception as exc:
            ray.shutdown()
            started = [child for child in psutil.Process().children(recursive=True) if child.pid not in ours]
            for child in started:
                child.kill()
            psutil.wait_procs(started, timeout=30)
            if attempt == 3 or not any(sign in str(exc) for sign in SLOW_START):
                raise
    raise AssertionError("unreachable")


def two_node_cluster():  # type: ignore[no-untyped-def]
    """`ray.cluster_utils.Cluster`: a head and a worker node of one CPU each
    on this machine (each with its own raylet and temp dir), started as `start_ray` starts."""
    from ray.cluster_utils import Cluster

    def start():  # type: ignore[no-untyped-def]
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        cluster.add_node(num_cpus=1)
        return cluster

    return start_ray(start)
