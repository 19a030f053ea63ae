"""What rltrack's JAX callback costs a PureJaxRL-style run (issue 41).

Two workloads, each one jitted, vmapped train loop (`jit(vmap(train))` over 4
seeds) logging 12 metrics per update and seed from inside the loop:

  * `tiny`: a policy gradient step of a 64x64 MLP on batches of 256, ~60 µs of
    work per callback: the worst case, rltrack's cost beside almost nothing;
  * `ppo`: PureJaxRL's PPO on CartPole with its config (bench/purejaxrl_ppo.py:
    4 envs x 128 steps, 4 epochs x 4 minibatches per update, a callback per
    update), as its users train.

Each is compiled once per form of the callback before any timing and run in
five variants, `--repetitions` times, the order rotated and reversed every
other repetition (no variant always follows the same one):

  * `no callback`: the same loop without a callback;
  * `callback, no rltrack`: `jax.debug.callback(fn, metrics, step=..., seed=...)`
    with `fn` doing nothing: the library's run without rltrack (what JAX's
    callback itself costs);
  * `rltrack, jax.debug.callback(log, ...)`: the same line with `fn` a
    `SeedLogger` (a run per seed, the local backend; the runs are made before
    the timing, `seeds=`, and closed after it; the agent writes the files in
    its own process);
  * `packed, no rltrack`: the values packed as `SeedLogger.callback` packs them
    (one array per dtype), JAX's callback of them doing nothing: what the
    packing alone saves;
  * `rltrack, log.callback(...)`: `SeedLogger.callback` in place of the line.

Wall time and the process's CPU time (rltrack's pipeline thread included) of
one run of the loop, medians, and each repetition's ratio to the no-op
callback of the same repetition (paired); rltrack's CPU per callback on the
callback's thread and on its pipeline thread. Target: rltrack ≤ 1.03× the run
without it (`callback, no rltrack`), wall and process CPU.

    python bench/bench_jax.py                 # about four minutes
    python bench/bench_jax.py --quick         # about a minute
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from purejaxrl_ppo import make_ppo  # noqa: E402
from report import Section, arguments, verdict  # noqa: E402
from timing import repeat_alternating  # noqa: E402

from rltrack.adapters.jax import SeedLogger  # noqa: E402

SEEDS, BATCH, HIDDEN = 4, 256, 64


def make_train(updates: int, emit):
    """`train(key, seed)` of PureJaxRL's shape, `emit(metrics, step, seed)` called inside it (None: no logging)."""

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
            if emit is not None:
                probs = jax.nn.softmax(logits)
                metrics = {"loss": loss, "episode_return": returns.mean(), "return_std": returns.std(), "entropy": -(probs * jnp.log(probs)).sum(1).mean(),
                           "grad_norm": optax_norm(grads), "w1_norm": jnp.linalg.norm(params["w1"]), "w2_norm": jnp.linalg.norm(params["w2"]),
                           **{f"prob/{a}": probs[:, a].mean() for a in range(4)}, "logit_max": logits.max()}  # fmt: skip
                emit(metrics, (i + 1) * BATCH, seed)
            return (params, key), None

        (params, _), _ = jax.lax.scan(update, (init(key), key), jnp.arange(updates))
        return params

    return train


def optax_norm(tree) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(tree)))


#: workload -> (its `make(updates, log)`, what it is)
WORKLOADS = {
    "tiny": (make_train, "the tiny loop (a policy gradient step of a 64x64 MLP on a batch of 256: far less work per callback than a real update)"),
    "ppo": (make_ppo, "PureJaxRL's PPO on CartPole (bench/purejaxrl_ppo.py: 4 envs x 128 steps, 4 epochs x 4 minibatches, a callback per update)"),
}


def compiled(make, updates: int, emit):
    keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
    fn = jax.jit(jax.vmap(make(updates, emit))).lower(keys, jnp.arange(SEEDS)).compile()
    return lambda: fn(keys, jnp.arange(SEEDS))


def pipeline_clock() -> int | None:
    """The CPU clock of rltrack's pipeline thread (its name in `rltrack.training.pipeline.PIPELINES`), where the platform has one."""
    for thread in threading.enumerate():
        if thread.name == "rltrack-pipeline" and thread.ident is not None and hasattr(time, "pthread_getcpuclockid"):
            return time.pthread_getcpuclockid(thread.ident)
    return None


class Packed:
    """What `SeedLogger.callback` traces (the values packed one array per dtype),
    compiled once: each repetition's logger, or none, takes what crosses."""

    callback = SeedLogger.callback

    def __init__(self) -> None:
        self.target: Any = None

    def _unpacked(self, *args: Any) -> None:
        if self.target is not None:
            self.target(*args)


PLAIN, PACKED = "rltrack, jax.debug.callback(log, ...)", "rltrack, log.callback(...)"
BASE = "callback, no rltrack"


def measure(workload: str, updates: int, repetitions: int, tmp: str) -> list[str]:
    """The five variants of one workload: its table, its figures per callback and its verdicts."""
    make = WORKLOADS[workload][0]
    cpu: dict[str, list[float]] = {}
    calling: dict[str, list[int]] = {PLAIN: [], PACKED: []}  # ns on the callback's thread inside rltrack
    pipeline: dict[str, list[float]] = {PLAIN: [], PACKED: []}  # the pipeline thread's CPU seconds per timed run
    target = [lambda *a, **k: None]  # what the compiled `jax.debug.callback` calls: a no-op or this repetition's logger
    packed = Packed()
    without = compiled(make, updates, None)
    with_callback = compiled(make, updates, lambda metrics, step, seed: jax.debug.callback(lambda *a, **k: target[0](*a, **k), metrics, step=step, seed=seed))
    with_packed = compiled(make, updates, packed.callback)
    counter = iter(range(10**6))

    def timed_on(name: str, call):
        def timed_call(*args, **kwargs):
            start = time.thread_time_ns()
            call(*args, **kwargs)
            calling[name].append(time.thread_time_ns() - start)

        return timed_call

    def logger() -> SeedLogger:
        return SeedLogger(run={"root": tmp, "name": f"{workload}{next(counter)}", "close_timeout": None}, backends={"use": ["local"]}, seeds=range(SEEDS))

    def plain_rltrack():
        log = logger()
        target[0] = timed_on(PLAIN, log)
        return with_callback, log

    def packed_rltrack():
        log = logger()
        packed.target = timed_on(PACKED, log._unpacked)
        return with_packed, log

    def no_op():
        target[0] = lambda *a, **k: None
        return with_callback, None

    def packed_no_op():
        packed.target = None
        return with_packed, None

    variants = {"no callback": lambda: (without, None), BASE: no_op, PLAIN: plain_rltrack, "packed, no rltrack": packed_no_op, PACKED: packed_rltrack}

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
                    pipeline[name].append(time.clock_gettime(clock) - start)
                log.close()
            return wall

        return once

    results = repeat_alternating({name: timed(name) for name in variants}, repetitions)
    calls = SEEDS * updates
    lines = [f"**{workload}**: {WORKLOADS[workload][1]}; {SEEDS} seeds vmapped, {updates} updates each, 12 metrics per update and seed "
             f"({calls:,} callbacks in the timed run, after a warm-up run); medians of {repetitions} repetitions, paired: each repetition's "
             "run against the no-op callback's run of the same repetition", "",
             "| variant | wall s (median, min–max) | process CPU s (median) | wall vs the run without rltrack (paired) | CPU vs the run without rltrack (paired) |",
             "|---|---|---|---|---|"]  # fmt: skip
    paired: dict[str, tuple[float, float]] = {}
    for name, r in results.items():
        walls = [a / b for a, b in zip(r["values"], results[BASE]["values"])]
        used = [a / b for a, b in zip(cpu[name], cpu[BASE])]
        paired[name] = statistics.median(walls), statistics.median(used)
        lines.append(f"| {name} | {r['median']:.3f} ({r['lo']:.3f}–{r['hi']:.3f}) | {statistics.median(cpu[name]):.3f} | "
                     f"{paired[name][0]:.3f}× ({min(walls):.3f}–{max(walls):.3f}) | {paired[name][1]:.3f}× ({min(used):.3f}–{max(used):.3f}) |")  # fmt: skip

    def per_call(name: str, of: str = "no callback") -> str:
        wall = (results[name]["median"] - results[of]["median"]) / calls * 1e6
        used = (statistics.median(cpu[name]) - statistics.median(cpu[of])) / calls * 1e6
        return f"{wall:+.0f} µs of wall, {used:+.0f} µs of process CPU"

    def inside(name: str) -> str:
        threads = f"{statistics.mean(calling[name]) / 1000:.1f} µs inside rltrack on the callback's thread (mean of {len(calling[name]):,} calls)"
        on_pipeline = f"{statistics.median(pipeline[name]) / calls * 1e6:.1f} µs" if pipeline[name] else "not measured (no `pthread_getcpuclockid`)"
        return f"{threads}, {on_pipeline} on rltrack's pipeline thread"

    lines += ["", f"Per callback: the training between two callbacks {results['no callback']['median'] / calls * 1e6:,.0f} µs of wall; "
              f"JAX's callback of the 14 values itself {per_call(BASE)}, of the packed values {per_call('packed, no rltrack')}. "
              f"rltrack through `jax.debug.callback(log, ...)`: {per_call(PLAIN, BASE)} over the no-op callback ({inside(PLAIN)}). "
              f"rltrack through `log.callback(...)`: {per_call(PACKED, 'packed, no rltrack')} over the packed no-op callback ({inside(PACKED)}).", ""]  # fmt: skip
    for name in (PACKED, PLAIN):
        wall, used = paired[name]
        lines += [verdict(f"{workload}: {name}, wall", f"{wall:.3f}× the run without rltrack (paired median)", "≤ 1.03×", wall <= 1.03),
                  verdict(f"{workload}: {name}, process CPU", f"{used:.3f}× the run without rltrack (paired median)", "≤ 1.03×", used <= 1.03)]  # fmt: skip
    return lines + [""]


def main() -> None:
    parser = arguments(__doc__, "tiny: 200 updates, ppo: 20 updates, 3 repetitions")
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--workload", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--updates", type=int, default=1000, help="updates of the tiny loop")
    parser.add_argument("--ppo-updates", type=int, default=100, help="updates of PureJaxRL's PPO")
    args = parser.parse_args()
    updates = {"tiny": 200, "ppo": 20} if args.quick else {"tiny": args.updates, "ppo": args.ppo_updates}
    repetitions = 3 if args.quick else args.repetitions
    section = Section()
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workload:
            lines += measure(workload, updates[workload], repetitions, tmp)
    section.finish("bench_jax: rltrack's JAX callback in a jit(vmap(train)) loop (issue 41)", "\n".join(lines), write=not args.no_write)


if __name__ == "__main__":
    main()
