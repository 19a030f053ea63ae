"""The tests' one wait: poll a condition until it holds, within a bound.

`wait_until(condition, seconds, what=...)` calls `condition` every `every`
seconds until it returns something true and returns that value; at `seconds`
it fails, saying what was pending (`what`: a text, or a callable giving one
when the wait fails, for the state the test saw last). Every test that waits
for another thread or process uses it: nothing waits forever, and a wait ends
as soon as its condition holds (no fixed sleeps standing in for one).
`wait_while_advancing` bounds the time without progress instead, for work
a busy machine slows down.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], seconds: float, what: str | Callable[[], str], every: float = 0.05) -> T:
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pending = what() if callable(what) else what
            raise AssertionError(f"waited {seconds:g} s for {pending}")
        time.sleep(every)


def wait_while_advancing(condition: Callable[[], T], progress: Callable[[], object], stall: float, what: str | Callable[[], str], every: float = 0.05) -> T:
    """`wait_until`, bounded by the time without progress instead of the
    total: each change of `progress()` (how far the awaited work has come)
    starts `stall` again. For work that a loaded machine slows without
    stopping it (the agent delivering beside busy loops): the
    wait fails when the work stops, not when it is slow."""
    seen = progress()
    deadline = time.monotonic() + stall
    while True:
        value = condition()
        if value:
            return value
        now = time.monotonic()
        if (current := progress()) != seen:
            seen, deadline = current, now + stall
        if now >= deadline:
            pending = what() if callable(what) else what
            raise AssertionError(f"waited for {pending}: no progress for {stall:g} s")
        time.sleep(every)
