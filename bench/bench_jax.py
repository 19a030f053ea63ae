"""What rltrack's `jax.debug.callback` target costs a PureJaxRL-style run (issue 41).

Two workloads, each one jitted, vmapped train loop (`jit(vmap(train))` over 4
seeds) logging 12 metrics per update and seed through `jax.debug.callback`:

  * `tiny`: a policy gradient step of a 64x64 MLP on batches of 256, ~60 µs of
    work per callback: the worst case, rltrack's cost beside almost nothing;
  * `ppo`: PureJaxRL's PPO on CartPole with its config (bench/purejaxrl_ppo.py:
    4 envs x 128 steps, 4 epochs x 4 minibatches per update, a callback per
    update), as its users train.

Each is compiled once (with and without the callback) before any timing and
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
the callback without rltrack, wall and process CPU.

    python bench/bench_jax.py                 # about two minutes
    python bench/bench_jax.py --quick         # less than a minute
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
from purejaxrl_ppo import make_ppo  # noqa: E402
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


#: workload -> (its `make(updates, log)`, what it is)
WORKLOADS = {
    "tiny": (make_train, "the tiny loop (a policy gradient step of a 64x64 MLP on a batch of 256: far less work per callback than a real update)"),
    "ppo": (make_ppo, "PureJaxRL's PPO on CartPole (bench/purejaxrl_ppo.py: 4 envs x 128 steps, 4 epochs x 4 minibatches, a callback per update)"),
}


def compiled(make, updates: int, log):
    keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
    fn = jax.jit(jax.vmap(make(updates, log))).lower(keys, jnp.arange(SEEDS)).compile()
    return lambda: fn(keys, jnp.arange(SEEDS))


def pipeline_clock() -> int | None:
    """The CPU clock of rltrack's pipeline thread (its name in `rltrack.training.pipeline.PIPELINES`), where the platform has one."""
    for thread in threading.enumerate():
        if thread.name == "rltrack-pipeline" and thread.ident is not None and hasattr(time, "pthread_getcpuclockid"):
            return time.pthread_getcpuclockid(thread.ident)
    return None


def measure(workload: str, updates: int, repetitions: int, tmp: str) -> list[str]:
    """The three variants of one workload, alternating: its table, its figures per callback and its verdict."""
    make = WORKLOADS[workload][0]
    cpu: dict[str, list[float]] = {}
    calling: list[int] = []
    pipeline: list[float] = []  # the pipeline thread's CPU seconds per timed run
    target = [lambda *a, **k: None]  # what the one compiled callback calls: a no-op or the SeedLogger of this repetition
    without = compiled(make, updates, None)
    with_callback = compiled(make, updates, lambda *a, **k: target[0](*a, **k))
    counter = iter(range(10**6))

    def with_rltrack():
        log = SeedLogger(run={"root": tmp, "name": f"{workload}{next(counter)}", "close_timeout": None}, backends={"use": ["local"]}, seeds=range(SEEDS))

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
    calls = SEEDS * updates
    base, base_cpu = results["callback, no rltrack"]["median"], statistics.median(cpu["callback, no rltrack"])
    lines = [f"**{workload}**: {WORKLOADS[workload][1]}; {SEEDS} seeds vmapped, {updates} updates each, 12 metrics per update and seed "
             f"({calls:,} callbacks in the timed run, after a warm-up run); medians of {repetitions} alternating repetitions", "",
             "| variant | wall s (median, min–max) | process CPU s (median) | wall vs the callback without rltrack | CPU vs the callback without rltrack |",
             "|---|---|---|---|---|"]  # fmt: skip
    for name, r in results.items():
        used = statistics.median(cpu[name])
        lines.append(f"| {name} | {r['median']:.3f} ({r['lo']:.3f}–{r['hi']:.3f}) | {used:.3f} | {r['median'] / base:.3f}× | {used / base_cpu:.3f}× |")
    ratio, cpu_ratio = results["rltrack SeedLogger"]["median"] / base, statistics.median(cpu["rltrack SeedLogger"]) / base_cpu
    per_call = (results["callback, no rltrack"]["median"] - results["no callback"]["median"]) / calls * 1e6
    added = (results["rltrack SeedLogger"]["median"] - base) / calls * 1e6
    added_cpu = (statistics.median(cpu["rltrack SeedLogger"]) - base_cpu) / calls * 1e6
    callback_cpu = (base_cpu - statistics.median(cpu["no callback"])) / calls * 1e6
    on_pipeline = f"{statistics.median(pipeline) / calls * 1e6:.1f} µs" if pipeline else "not measured (no `pthread_getcpuclockid`)"
    paired_wall = [a / b for a, b in zip(results["rltrack SeedLogger"]["values"], results["callback, no rltrack"]["values"])]
    paired_cpu = [a / b for a, b in zip(cpu["rltrack SeedLogger"], cpu["callback, no rltrack"])]
    lines += ["", f"Paired, each repetition's run against the no-op callback's run of the same repetition (less sensitive to the load "
              f"changing between repetitions): wall {statistics.median(paired_wall):.3f}× (median; {min(paired_wall):.3f}–{max(paired_wall):.3f}), "
              f"process CPU {statistics.median(paired_cpu):.3f}× ({min(paired_cpu):.3f}–{max(paired_cpu):.3f}).", ""]  # fmt: skip
    lines += [f"Per callback: the training between two callbacks {results['no callback']['median'] / calls * 1e6:,.0f} µs of wall; "
              f"JAX's callback itself {per_call:+.0f} µs of wall, {callback_cpu:+.0f} µs of process CPU; rltrack's `SeedLogger` {added:+.0f} µs of wall, "
              f"{added_cpu:+.0f} µs of process CPU (pipeline thread included): inside `SeedLogger` on the callback's thread "
              f"{statistics.mean(calling) / 1000:.1f} µs (mean; median {statistics.median(calling) / 1000:.1f} µs, of {len(calling):,} calls), on rltrack's "
              f"pipeline thread {on_pipeline} (median of the timed runs); the rest on XLA's threads outside `SeedLogger`.", "",
              verdict(f"{workload}: rltrack SeedLogger, wall", f"{ratio:.3f}× the callback without rltrack", "≤ 1.03×", ratio <= 1.03),
              verdict(f"{workload}: rltrack SeedLogger, process CPU", f"{cpu_ratio:.3f}× the callback without rltrack", "≤ 1.03×", cpu_ratio <= 1.03), ""]  # fmt: skip
    return lines


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
    section.finish("bench_jax: the jax.debug.callback target in a jit(vmap(train)) loop (issue 41)", "\n".join(lines), write=not args.no_write)


if __name__ == "__main__":
    main()
