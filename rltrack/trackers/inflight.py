"""Several batches of one tracker run on the wire at once, acknowledged in order.

Why this exists: a delivery that sends one batch and waits for the answer is
capped by the server's latency, not its capacity: one agent's MLflow lane
delivered 4.2-4.8k values/s to a PostgreSQL-backed server that had cores to
spare. `InFlight` sends up to `limit` batches at once on a pool of threads
shared by every run of one store, and numbers them (tickets): `acked` is the
last ticket below which every batch was stored, which the backend reports as
how far it has stored (`Progress.stored`), so the delivery's cursor only ever moves past a
contiguous prefix of acknowledged batches (rltrack.delivery.worker). A
batch that fails is raised once, at the next `collect` or `submit`;
`rewind` then waits for the batches still out, forgets everything after
`acked`, and the delivery sends again from its cursor (a tracker that keeps
duplicates out, MLflow's identical rows, stores each value once).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

_POOLS: dict[str, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(store: str, threads: int) -> ThreadPoolExecutor:
    """The sending threads of one store (made on first use, threads as needed)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(store)
        if pool is None or pool._max_workers < threads:  # noqa: SLF001 - a store asked for more at once gets a bigger pool
            pool = _POOLS[store] = ThreadPoolExecutor(threads, thread_name_prefix="rltrack-send")
        return pool


class InFlight:
    """At most `limit` batches of one tracker run out at once on `pool`."""

    def __init__(self, pool: ThreadPoolExecutor, limit: int) -> None:
        self._pool = pool
        self.limit = limit
        self._out: deque[tuple[int, Future[None], Callable[[], None]]] = deque()  # ticket, its send, what to record once it is stored
        self.sent = 0  # the last ticket given
        self.acked = 0  # every ticket up to this one is stored
        self._failed = False

    def submit(self, send: Callable[[], None], stored: Callable[[], None]) -> int:
        """Sends a batch (`send`, on the pool) once fewer than `limit` are out;
        `stored` runs on the caller's thread when it and all before it are
        acknowledged. Returns its ticket."""
        self.collect()
        while len(self._out) >= self.limit:
            wait([self._out[0][1]])
            self.collect()
        self.sent += 1
        self._out.append((self.sent, self._pool.submit(send), stored))
        return self.sent

    def collect(self) -> int:
        """Records the batches acknowledged so far, in order; returns `acked`.
        Raises the error of the first batch that failed (then `rewind`)."""
        if self._failed:
            raise RuntimeError("a batch sent earlier failed: delivery goes back to its cursor first")
        while self._out and self._out[0][1].done():
            ticket, future, stored = self._out[0]
            error = future.exception()
            if error is not None:
                self._failed = True
                raise error
            self._out.popleft()
            stored()
            self.acked = ticket
        return self.acked

    def drain(self) -> int:
        """Waits for every batch out; returns `acked` (raises as `collect`)."""
        wait([future for _, future, _ in self._out])
        return self.collect()

    def rewind(self) -> bool:
        """After a failure: waits for the batches still out, forgets them and
        every ticket after `acked`; True when there was something to forget."""
        if not self._failed and not self._out:
            return False
        wait([future for _, future, _ in self._out])
        self._out.clear()
        self.sent = self.acked
        self._failed = False
        return True
