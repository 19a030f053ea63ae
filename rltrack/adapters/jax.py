"""JAX -> rltrack: `SeedLogger`, a logging function for `jax.debug.callback`
that keeps the seeds of a vmapped train loop apart.

PureJaxRL and its descendants train every seed at once, `jit(vmap(train))(keys)`,
and log from inside the compiled loop with `jax.debug.callback(fn, metrics)`.
Under `vmap`, JAX calls `fn` once per seed with that seed's values (jax 0.8),
in turn, without saying which seed it is: a logger that is not told writes
the seeds' values interleaved into one series. So pass the seed (its index or
its number, a vmapped integer) as an argument of the callback:

    from rltrack.adapters.jax import SeedLogger
    log = SeedLogger(run={"name": "ppo_cartpole"}, hparams=config)

    def train(key, seed):                       # seed: the vmapped seed index
        ...
        log.callback(metrics, step=update_step * num_envs * num_steps, seed=seed)
        ...

    jax.jit(jax.vmap(train))(jax.random.split(key, 3), jnp.arange(3))
    log.close()

`log.callback(...)` is `jax.debug.callback(log, metrics, step=..., seed=...)`
with the values packed first, one array per dtype: JAX's callback costs per
argument (~25 µs each in PureJaxRL's PPO), so 14 values cross as 2 arrays and
a run logging through rltrack is faster than the same run logging through
`jax.debug.callback` into a function that does nothing (bench/bench_jax.py).
`jax.debug.callback(log, ...)` works as well, value for value the same.

What a call `log(metrics, step, seed)` becomes:

* one run per seed (`per_seed="runs"`, the default), named `<name>_seed<seed>`,
  all in one experiment (`run.task`: the config's, else the script's name),
  with the hyperparameters given plus `seed`: the run database groups runs
  that differ only in their seed as one group (`rltrack plot`, `report`).
  `per_seed="keys"` writes one run instead, each key once per seed as
  `<key>/seed<seed>`;
* `metrics` is a (nested) dict, keys flattened with "/" and kept as written;
  a jax array, numpy scalar or 0-d array becomes a Python number on the
  caller's thread (no "converted" notice: nothing is lost), an array of
  several values a histogram;
* `step` on the axis `step_axis` (`env_steps`); without one, the number of
  calls for that seed so far on the axis `step`;
* a `seed` with a leading axis (the callback called outside `vmap` with every
  seed's values stacked: seeds of shape `(n,)`) splits every value (and a
  `step` of shape `(n,)`) along its first axis, one seed each. Without `seed`, the values are one run's (`seed` None: no seed
  axis is guessed).

The first value of a seed makes its run (as `rltrack.make_logger` does: a
few milliseconds, once); `seeds=[0, 1, 2]` makes them when the logger is made
instead. `close()` ends every run; an exception that ends the process ends
them `failed`, as for every rltrack run.
"""

from __future__ import annotations

import threading
import warnings
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Mapping

from rltrack.adapters.library_run import emit_values, numeric, open_run, plain, plain_each
from rltrack.core.values import flatten
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

SOURCE = "jax"
#: `jax.debug.callback` targets, vmapped seeds kept apart: an adapter, no table of its own.
LIBRARY = Library(adapter=True)
PER_SEED = ("runs", "keys")
#: `callback`'s keys for the step and the seed among the packed values: objects no metric key equals.
_STEP, _SEED = object(), object()


class SeedLogger:
    """A `jax.debug.callback` target writing one rltrack run per seed; see the module docstring."""

    def __init__(
        self,
        config: str | Path | Mapping[str, Any] | None = None,
        *,
        hparams: Mapping[str, Any] | None = None,
        seeds: Iterable[int] = (),
        per_seed: str = "runs",
        step_axis: str = STEP_AXIS,
        **sections: Any,
    ) -> None:
        if per_seed not in PER_SEED:
            raise ValueError(f'per_seed={per_seed!r}: give "runs" (a run per seed) or "keys" (one run, keys `<key>/seed<seed>`)')
        from rltrack.training.config import default_task, load_config

        self._config = config
        self._sections = sections
        run = load_config(config, **sections)["run"]
        self.name = run["name"] or default_task(None)
        self.task = run["task"] or default_task(self.name)
        self.hparams = dict(hparams or {})
        self.per_seed = per_seed
        self.step_axis = step_axis
        self.runs: dict[Any, Any] = {}  # seed (None: no seed) -> its rltrack Logger
        self._calls: dict[Any, int] = {}
        self._lock = threading.Lock()
        self._last_steps: dict[str, int] = {}
        self._last_keys: set[str] = set()
        self._warned = False
        for seed in seeds:
            self._run(int(seed))

    def __call__(self, metrics: Mapping[str, Any], step: Any = None, seed: Any = None) -> None:
        """Log one seed's `metrics` (or every seed's, along a leading axis of `seed`)."""
        if seed is not None and getattr(seed, "ndim", 0) > 0:
            import numpy as np  # jax's own dependency

            stacked = getattr(step, "ndim", 0) > 0
            for index, one in enumerate(np.asarray(seed).tolist()):
                self._one(_taken(metrics, index), plain(step[index] if stacked else step), _label(one))
        else:
            step, seed = plain_each([step, seed])
            self._one(metrics, step, None if seed is None else _label(seed))

    log = __call__

    def callback(self, metrics: Mapping[str, Any], step: Any = None, seed: Any = None) -> None:
        """Inside a jitted function, in place of `jax.debug.callback(self,
        metrics, step=step, seed=seed)`: the same values, packed before they
        cross. JAX's callback costs per argument (each is copied to the host
        and wrapped in an array: ~25 µs an argument in PureJaxRL's PPO), so the
        scalars of each dtype travel stacked in one array, exact (nothing is
        cast): 12 metrics with a step and a seed cross as 2 arrays, not 14. An
        array value (a histogram) and a value of another kind cross as they are."""
        import jax
        import jax.numpy as jnp

        named = {**flatten(dict(metrics)), _STEP: step, _SEED: seed}
        stacks: dict[Any, tuple[list[Any], list[Any]]] = {}  # dtype -> (keys, 0-d values)
        others: tuple[list[Any], list[Any]] = ([], [])  # (keys, values) crossing as they are
        for key, value in named.items():
            if value is None:
                if key is _STEP or key is _SEED:
                    continue
                keys, values = others  # as `jax.debug.callback` hands a None over
            else:
                value = jnp.asarray(value)
                keys, values = stacks.setdefault(value.dtype, ([], [])) if value.ndim == 0 and _packable(value.dtype) else others
            keys.append(key)
            values.append(value)
        layout = (tuple(tuple(keys) for keys, _ in stacks.values()), tuple(others[0]), tuple(key for key in named if key not in (_STEP, _SEED)))
        jax.debug.callback(partial(self._unpacked, layout), [jnp.stack(values) for _, values in stacks.values()], others[1])

    def _unpacked(self, layout: tuple[Any, ...], stacked: list[Any], others: list[Any]) -> None:
        """The host side of `callback`: one conversion to Python numbers a dtype, then as `__call__`."""
        import numpy as np  # jax's own dependency

        stacked_keys, other_keys, order = layout
        values: dict[Any, Any] = dict(zip(other_keys, others))
        for keys, array in zip(stacked_keys, stacked):
            values.update(zip(keys, numeric(np.asarray(array)).tolist()))
        metrics = {key: values[key] for key in order}  # every key crossed, stacked or as it is
        step, seed = values.get(_STEP), values.get(_SEED)
        if getattr(seed, "ndim", 0) or getattr(step, "ndim", 0):  # stacked seeds, outside vmap
            self(metrics, step, seed)
        else:
            self._one(metrics, step, None if seed is None else _label(seed))

    def _one(self, metrics: Mapping[str, Any], step: int | float | None, seed: Any) -> None:
        """One seed's values; `step` and `seed` already Python numbers."""
        run_key = seed if self.per_seed == "runs" else None
        logger = self.runs.get(run_key) or self._run(run_key)
        if step is None:
            calls = self._calls[seed] = self._calls.get(seed, -1) + 1
            steps: Any = {"step": calls}
        else:
            steps = {self.step_axis: int(step)}
            if seed is None:
                self._check_not_interleaved(metrics, steps)
        if seed is not None and self.per_seed == "keys":
            metrics = {f"{key}/seed{seed}": value for key, value in flatten(dict(metrics)).items()}
        emit_values(logger, metrics, steps, SOURCE, ready=True)  # a callback's arguments are host values, computed

    def _check_not_interleaved(self, metrics: Mapping[str, Any], steps: dict[str, int]) -> None:
        """Says once (a warning: training goes on, every value is kept) when a
        key arrives twice in a row at one step without a seed: what a vmapped
        loop whose callback is not given the seed looks like."""
        keys = set(metrics)
        if steps == self._last_steps and keys & self._last_keys and not self._warned:
            self._warned = True
            key = min(keys & self._last_keys)
            warnings.warn(
                f"SeedLogger: {key!r} arrived twice at {self.step_axis}={steps[self.step_axis]} without a seed, as from a "
                "jit(vmap(train)) loop (JAX calls the callback once per seed): the seeds' values are interleaved in one run. "
                "Pass the vmapped seed to the callback: jax.debug.callback(log, metrics, step=..., seed=seed)",
                RuntimeWarning, stacklevel=2,
            )  # fmt: skip
        self._last_steps, self._last_keys = steps, keys

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        """More hyperparameters, for every seed's run (those made later get them too)."""
        self.hparams.update(hparams)
        for seed, logger in list(self.runs.items()):
            logger.log_hparams(dict(hparams) if seed is None else {**hparams, "seed": seed})

    def _run(self, seed: Any) -> Any:
        with self._lock:  # two callbacks of one new seed make one run
            if seed in self.runs:
                return self.runs[seed]
            name = self.name if seed is None else f"{self.name}_seed{seed}"
            sections = {**self._sections, "run": {**(self._sections.get("run") or {}), "name": name, "task": self.task}}
            logger = open_run(self._config, sections, framework=SOURCE)
            hparams = self.hparams if seed is None else {**self.hparams, "seed": seed}
            if hparams:
                logger.log_hparams(hparams)
            self.runs[seed] = logger
            return logger

    def flush(self, timeout: float | None = None) -> None:
        for logger in list(self.runs.values()):
            logger.flush(timeout)

    def close(self, status: str = "finished") -> None:
        """Ends every seed's run with `status`."""
        for logger in list(self.runs.values()):
            logger.close(status=status)


def _packable(dtype: Any) -> bool:
    """A dtype whose values `callback` stacks and reads back exactly as Python numbers: bools, integers, real floats."""
    import jax.numpy as jnp

    return any(jnp.issubdtype(dtype, kind) for kind in (jnp.bool_, jnp.integer, jnp.floating))


def _label(seed: Any) -> Any:
    """A seed as runs are named and grouped by it: an integral float (`jnp.arange(3.0)`) as an int."""
    return int(seed) if isinstance(seed, float) and seed.is_integer() else seed


def _taken(metrics: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One seed's slice of a (nested) dict of arrays with a leading seed axis."""
    return {key: _taken(value, index) if isinstance(value, Mapping) else _at(value, index) for key, value in metrics.items()}


def _at(value: Any, index: int) -> Any:
    shape = getattr(value, "shape", None)
    if not shape:
        raise ValueError(
            f"SeedLogger: seed has a leading axis (one entry per seed) but a value of shape {shape!r} has none; "
            "give every value that axis (call the callback inside vmap with a scalar seed, or outside with arrays of shape (seeds, ...))"
        )
    return value[index]


__all__ = ["SeedLogger"]
