"""What rltrack's `jax.debug.callback` target costs a PureJaxRL-style run (issue 41).

One jitted, vmapped train loop (`jit(vmap(train))` over 4 seeds: a policy
gradient with a 64x64 MLP on batches of 256, 12 metrics logged per update
through `jax.debug.callback`), compiled once (with and without the callback) before any timing,
run in three variants, alternating, `--repetitions` times:

  * `no callback`: the same loop without `jax.debug.callback`;
  * `callback, no rltrack`: the callback calls a function that does nothing
    (the same jitted run without rltrack: what JAX's callback itself costs);
  * `rltrack SeedLogger`: the callback is `SeedLogger` (a run per seed, the
    local backend; the runs are made before the timing, `seeds=`, and closed
    after it; the agent writes the files in its own process).

Wall time and the process's CPU time (rltrack's pipeline thread included) of
one run of the loop, medians; for rltrack, its CPU per callback on each thread:
inside `SeedLogger` on the callback's thread, and on rltrack's pipeline thread
(until the timed run's records are in the journal). Target: rltrack ≤ 1.03×
the callback without rltrack, wall.

    python bench/bench_jax.py                 # about a minute
    python bench/bench_jax.py --quick         # a few seconds
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from report import Section, arguments, verdict  # noqa: E402
from timing import repeat_alternating  # noqa: E402

from rltrack.adapters.jax import SeedLogger  # noqa: E402

SEEDS, BATCH, HIDDEN = 4, 256, 64


def make_train(updates: int, log):
    """`train(key, seed)` of PureJaxRL's shape; `log` None: no callback."""

    def init(key):
        k1, k2 = jax.random.split(key)
        return {"w1": jax.random.normal(k1, (8, HIDDEN)) * 0.1, "w2": jax.random.normal(k2, (HIDDEN, 4)) * 0.1}

    def loss_fn(params, obs, actions, returns):
        logits = jnp.tanh(obs @ params["w1"]) @ params["w2"]
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], axis=1)[:, 0]
        return -jnp.mean(logp * (returns - returns.mean())), logits

    def train(key, seed):
        def update(carry, i):
            params, key = carry
            key, k_obs, k_act = jax.random.split(key, 3)
            obs = jax.random.normal(k_obs, (BATCH, 8))
            actions = jax.random.randint(k_act, (BATCH,), 0, 4)
            returns = obs[:, 0] * (actions == 1) + 0.1 * obs[:, 1]
            (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, obs, actions, returns)
            params = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
            if log is not None:
                probs = jax.nn.softmax(logits)
                metrics = {"loss": loss, "episode_return": returns.mean(), "return_std": returns.std(), "entropy": -(probs * jnp.log(probs)).sum(1).mean(),
                           "grad_norm": optax_norm(grads), "w1_norm": jnp.linalg.norm(params["w1"]), "w2_norm": jnp.linalg.norm(params["w2"]),
                           **{f"prob/{a}": probs[:, a].mean() for a in range(4)}, "logit_max": logits.max()}  # fmt: skip
                jax.debug.callback(log, metrics, step=(i + 1) * BATCH, seed=seed)
            return (params, key), None

        (params, _), _ = jax.lax.scan(update, (init(key), key), jnp.arange(updates))
        return params

    return train


def optax_norm(tree) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(tree)))


def compiled(updates: int, log):
    keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
    fn = jax.jit(jax.vmap(make_train(updates, log))).lower(keys, jnp.arange(SEEDS)).compile()
    return lambda: fn(keys, jnp.arange(SEEDS))


def pipeline_clock() -> int | None:
    """The CPU clock of rltrack's pipeline thread (its name in `rltrack.training.pipeline.PIPELINES`), where the platform has one."""
    for thread in threading.enumerate():
        if thread.name == "rltrack-pipeline" and thread.ident is not None and hasattr(time, "pthread_getcpuclockid"):
            return time.pthread_getcpuclockid(thread.ident)
    return None


def main() -> None:
    parser = arguments(__doc__, "200 updates, 3 repetitions")
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--updates", type=int, default=1000)
    args = parser.parse_args()
    updates, repetitions = (200, 3) if args.quick else (args.updates, args.repetitions)
    section = Section()
    cpu: dict[str, list[float]] = {}
    calling: list[int] = []
    pipeline: list[float] = []  # the pipeline thread's CPU seconds per timed run
    target = [lambda *a, **k: None]  # what the one compiled callback calls: a no-op or the SeedLogger of this repetition
    without = compiled(updates, None)
    with_callback = compiled(updates, lambda *a, **k: target[0](*a, **k))
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**6))

        def with_rltrack():
            log = SeedLogger(run={"root": tmp, "name": f"bench{next(counter)}", "close_timeout": None}, backends={"use": ["local"]}, seeds=range(SEEDS))
            def timed_log(*args, **kwargs):  # the callback's own thread time in SeedLogger
                start = time.thread_time_ns()
                log(*args, **kwargs)
                calling.append(time.thread_time_ns() - start)

            target[0] = timed_log
            return with_callback, log

        def no_op():
            target[0] = lambda *a, **k: None
            return with_callback, None

        variants = {"no callback": lambda: (without, None), "callback, no rltrack": no_op, "rltrack SeedLogger": with_rltrack}

        def timed(name):
            def once() -> float:
                run, log = variants[name]()
                jax.block_until_ready(run())  # warm: the first execution allocates
                jax.effects_barrier()
                if log is not None:
                    log.flush()  # the warm-up's records are through the pipeline thread before the timing
                clock = pipeline_clock() if log is not None else None
                start = None if clock is None else time.clock_gettime(clock)
                wall, cpu0 = time.perf_counter(), time.process_time()
                jax.block_until_ready(run())
                jax.effects_barrier()
                wall, used = time.perf_counter() - wall, time.process_time() - cpu0
                cpu.setdefault(name, []).append(used)
                if log is not None:
                    log.flush()  # the pipeline thread's work for the timed run is done, outside the timing
                    if clock is not None:
                        pipeline.append(time.clock_gettime(clock) - start)
                    log.close()
                return wall

            return once

        results = repeat_alternating({name: timed(name) for name in variants}, repetitions)
    base = results["callback, no rltrack"]["median"]
    lines = [f"{SEEDS} seeds vmapped, {updates} updates each, 12 metrics per update and seed ({SEEDS * updates:,} callbacks in the timed run, after a "
             f"warm-up run); medians of {repetitions} alternating repetitions", "",
             "| variant | wall s (median, min–max) | process CPU s (median) | wall vs the callback without rltrack |", "|---|---|---|---|"]  # fmt: skip
    for name, r in results.items():
        lines.append(f"| {name} | {r['median']:.3f} ({r['lo']:.3f}–{r['hi']:.3f}) | {statistics.median(cpu[name]):.3f} | {r['median'] / base:.3f}× |")
    ratio = results["rltrack SeedLogger"]["median"] / base
    added = (statistics.median(cpu["rltrack SeedLogger"]) - statistics.median(cpu["callback, no rltrack"])) / (SEEDS * updates) * 1e6
    callback = (statistics.median(cpu["callback, no rltrack"]) - statistics.median(cpu["no callback"])) / (SEEDS * updates) * 1e6
    on_pipeline = f"{statistics.median(pipeline) / (SEEDS * updates) * 1e6:.1f} µs" if pipeline else "not measured (no `pthread_getcpuclockid`)"
    lines += ["", f"Process CPU per callback: JAX's callback itself {callback:.0f} µs, rltrack's `SeedLogger` (pipeline thread included) {added:+.0f} µs. "
              f"rltrack's CPU per callback on each thread: inside `SeedLogger` on the callback's thread {statistics.mean(calling) / 1000:.1f} µs "
              f"(mean; median {statistics.median(calling) / 1000:.1f} µs, of {len(calling):,} calls), on rltrack's pipeline thread {on_pipeline} (median of the "
              "timed runs); the rest of the process's added CPU is on XLA's threads outside `SeedLogger`.", "",
              verdict("rltrack SeedLogger, wall", f"{ratio:.3f}× the callback without rltrack", "≤ 1.03×", ratio <= 1.03)]  # fmt: skip
    section.finish("bench_jax: the jax.debug.callback target in a jit(vmap(train)) loop (issue 41)", "\n".join(lines), write=not args.no_write)


if __name__ == "__main__":
    main()
