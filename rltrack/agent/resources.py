"""What the agent takes of the machine: its priority and its file descriptors.

Why a module of its own: the agent (rltrack.agent.process) is background
work beside training, and both choices are measured trade-offs, said here
with their figures.
"""

from __future__ import annotations

import os
import resource
import sys

#: The agent's niceness (`RLTRACK_AGENT_NICENESS`; wandb-core inherits it): training's
#: own, so that trackers show a run while it keeps every core busy. Beside two busy loops
#: (bench/bench_freshness.py) at 19 values reached the trackers minutes late (its start,
#: ~3.5 s of CPU, took minutes at ~1.5% of a core), at 10 about 2 minutes, at 0 a median of 1.6 s (p99 14 s).
NICENESS_TEXT = os.environ.get("RLTRACK_AGENT_NICENESS", "0")
if not NICENESS_TEXT.strip().lstrip("+-").isdigit():
    raise ValueError(f"RLTRACK_AGENT_NICENESS={NICENESS_TEXT!r} is not a niceness: use a whole number from -20 to 19 (0, training's own, by default)")
NICENESS = int(NICENESS_TEXT)
#: Descriptors a writer picked up may come to hold (local files: text logs, csv,
#: event file; a cursor lock per tracker): 3.4 a run measured with local + MLflow.
#: A writer is picked up only while the descriptors held leave this much room.
FILES_PER_WRITER = 4
#: Descriptors kept for everything else (tracker clients, their stores and
#: sockets, registrations, states, journal reads): a quarter of the limit, at most this.
FILES_RESERVED = 256


def lower_priority() -> None:
    """`NICENESS` and Linux's SCHED_BATCH (waking up never preempts
    training). The agent stays in the session of the process that started it
    (out of its process tree and in a process group of its own, so neither a
    reaper of that tree nor a Ctrl-C meant for training reaches it; see
    rltrack.agent.keeper): where the kernel shares the CPU between sessions first (autogroups),
    an agent in a session of its own took an equal share against the whole of
    training however niced, and a Tune driver's loop is the sweep's critical
    path. 64 Tune trials on 2 cores: 1.28x Tune's wall time with the agent in
    its own session niced 10 (or 19), 1.09x in the starter's session niced 19
    (1.047x later, at 25e6f77). Niceness is per thread on Linux and is set
    before the agent starts a thread: every thread, and wandb-core, has it."""
    if NICENESS:
        try:
            os.nice(NICENESS)
        except PermissionError:  # below 0 needs privileges: the starter's niceness is kept
            print(f"rltrack agent: RLTRACK_AGENT_NICENESS={NICENESS} needs privileges; running at {os.nice(0)}", file=sys.stderr, flush=True)
    if hasattr(os, "sched_setscheduler"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass


def open_descriptors(writers: int) -> int:
    """The descriptors this process holds (Linux: /proc/self/fd; elsewhere
    `FILES_PER_WRITER` for each of its `writers`). Counted, not estimated:
    a writer's local files hold one per namespace it logs."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listing it
    except OSError:
        return FILES_PER_WRITER * writers


def descriptor_budget() -> int:
    """How many descriptors the agent may hold for its writers: the soft
    descriptor limit is raised to the hard one, and a reserve is kept for the
    tracker clients (their stores, sockets, threads)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    except (ValueError, OSError):
        pass
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(FILES_PER_WRITER, soft - min(FILES_RESERVED, soft // 4))
