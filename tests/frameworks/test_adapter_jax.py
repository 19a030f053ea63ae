"""JAX's `jax.debug.callback` -> rltrack: `rltrack.adapters.jax.SeedLogger` in a
PureJaxRL-style train loop, `jit(vmap(train))` over three seeds (a real
REINFORCE learner with optax on a bandit written in JAX), read back from
progress.csv, MLflow and W&B's run file, and grouped by the run database."""

from __future__ import annotations

import json

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (requirements/test.txt)")
optax = pytest.importorskip("optax", reason="optax is not installed (it comes with brax, requirements/test.txt)")
import jax.numpy as jnp  # noqa: E402
from library_readback import assert_once_everywhere, config  # noqa: E402

import rltrack.runs as runs  # noqa: E402
from rltrack.adapters.jax import SeedLogger  # noqa: E402
from rltrack.journal import read_journal  # noqa: E402
from rltrack.runs.plot import plot_runs  # noqa: E402

SEEDS, UPDATES, BATCH = 3, 6, 16
MEANS = jnp.array([0.2, 0.8])  # the bandit's arms


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _update(params, opt_state, key, optimizer):
    """One REINFORCE update on a batch of pulls: new params, state, key and the metrics."""
    key, pull, noise = jax.random.split(key, 3)
    actions = jax.random.categorical(pull, params["logits"], shape=(BATCH,))
    rewards = MEANS[actions] + 0.1 * jax.random.normal(noise, (BATCH,))

    def loss_fn(p):
        logp = jax.nn.log_softmax(p["logits"])[actions]
        return -jnp.mean(logp * (rewards - rewards.mean()))

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    metrics = {"episode_return": rewards.mean(), "loss": loss, "policy": {"p_best": jax.nn.softmax(params["logits"])[1]}}
    return optax.apply_updates(params, updates), opt_state, key, metrics


def _train(log, lr=0.5):
    """PureJaxRL's shape: `train(key, seed)` scans its updates and logs from inside with `jax.debug.callback`."""
    optimizer = optax.adam(lr)

    def train(key, seed):
        params = {"logits": jnp.zeros(2)}

        def step(carry, update):
            params, opt_state, key = carry
            params, opt_state, key, metrics = _update(params, opt_state, key, optimizer)
            jax.debug.callback(log, metrics, step=(update + 1) * BATCH, seed=seed)
            return (params, opt_state, key), None

        (params, _, _), _ = jax.lax.scan(step, (params, optimizer.init(params), key), jnp.arange(UPDATES))
        return params

    keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
    out = jax.jit(jax.vmap(train))(keys, jnp.arange(SEEDS))
    jax.effects_barrier()
    return out


class Received:
    """The callback's target, noting what JAX handed it (seed, step, flat metrics) before the logger."""

    def __init__(self, logger):
        self.logger, self.calls = logger, []

    def __call__(self, metrics, step=None, seed=None):
        self.calls.append((int(seed), int(step), {"episode_return": float(metrics["episode_return"]),
                           "loss": float(metrics["loss"]), "policy/p_best": float(metrics["policy"]["p_best"])}))  # fmt: skip
        self.logger(metrics, step=step, seed=seed)


@pytest.mark.slow  # three runs delivered to MLflow and W&B
def test_three_vmapped_seeds_are_three_runs_exact_in_every_tracker_and_one_group(tmp_path):
    log = SeedLogger(config(tmp_path / "runs", name="bandit_reinforce"), hparams={"lr": 0.5, "batch": BATCH, "anneal": False})
    received = Received(log)
    _train(received)
    log.close()
    assert sorted({seed for seed, _, _ in received.calls}) == [0, 1, 2] and len(received.calls) == SEEDS * UPDATES
    for seed in range(SEEDS):
        run_dir = log.runs[seed].run_dir
        assert run_dir.name == f"bandit_reinforce_seed{seed}"
        logged = [(key, "env_steps", step, value) for s, step, values in received.calls if s == seed for key, value in values.items()]
        assert_once_everywhere(run_dir, logged)  # each seed's values alone, none of another seed's
        from mlflow import MlflowClient

        from rltrack.delivery.cursor import tracker_state

        state = tracker_state(run_dir, "mlflow")
        assert MlflowClient(state["tracking_uri"]).get_run(state["run_id"]).data.params == {"lr": "0.5", "batch": "16", "anneal": "False", "seed": str(seed)}
        report = json.loads((run_dir / "report.json").read_text())
        assert not report.get("converted"), report  # jax arrays became numbers on the caller's side: no notice
    first = [values["episode_return"] for s, _, values in received.calls if s == 0]
    second = [values["episode_return"] for s, _, values in received.calls if s == 1]
    assert first != second  # the seeds really differ: an interleaved series would show
    run_dirs = [log.runs[seed].run_dir for seed in range(SEEDS)]
    table = runs.query(tmp_path / "runs")
    assert set(table["task"]) == {"bandit_reinforce"} and len(table) == SEEDS
    (curve,) = plot_runs([runs.load(d) for d in run_dirs], "episode_return").curves  # one group: the seeds of one setting
    assert len(curve.runs) == SEEDS and list(curve.count) == [SEEDS] * UPDATES


def test_values_stacked_along_a_seed_axis_are_split_one_run_each(tmp_path):
    """The callback called outside `vmap` (inside `jit`) with every seed's values
    stacked: a `seed` array of shape (seeds,) splits them; a scalar step holds for all."""
    log = SeedLogger(run={"root": str(tmp_path / "runs"), "name": "stacked"}, backends={"use": ["memory"]})
    optimizer = optax.sgd(0.1)

    @jax.jit
    def train_all(keys):
        params = jax.vmap(lambda _: {"logits": jnp.zeros(2)})(keys)
        states = jax.vmap(optimizer.init)(params)

        def step(carry, update):
            params, states, keys = carry
            params, states, keys, metrics = jax.vmap(lambda p, s, k: _update(p, s, k, optimizer))(params, states, keys)
            jax.debug.callback(log, metrics, step=update * BATCH, seed=jnp.arange(SEEDS))
            jax.debug.callback(lambda m: stacked.append(jax.tree.map(lambda x: x.tolist(), m)), metrics)
            return (params, states, keys), None

        jax.lax.scan(step, (params, states, keys), jnp.arange(2))

    stacked: list = []
    train_all(jax.random.split(jax.random.PRNGKey(1), SEEDS))
    jax.effects_barrier()
    log.close()
    assert sorted(log.runs) == [0, 1, 2]
    for seed in range(SEEDS):
        got = [(e.steps, e.data["loss"]) for e in read_journal(log.runs[seed].run_dir) if e.kind == "scalars" and "loss" in e.data]
        assert got == [({"env_steps": i * BATCH}, row["loss"][seed]) for i, row in enumerate(stacked)], seed


def _journal(logger) -> list:
    return [(e.kind, e.namespace, e.steps, e.data) for e in read_journal(logger.run_dir) if e.kind in ("scalars", "histogram")]


def test_the_packed_callback_logs_what_the_plain_callback_logs_exactly(tmp_path):
    """`log.callback(...)` inside `jit(vmap(...))` against `jax.debug.callback(log, ...)`:
    every dtype back as the same Python number (a step beyond float32's 2**24, bools
    as 0/1, float16 and bfloat16 exact), keys in the order written, a histogram as
    an array, one run per seed; and outside `vmap` with the seeds stacked."""

    def metrics_of(i, seed):
        x = (i + 1) * 0.1 + seed
        return {"ret": x.astype(jnp.float32), "n": (i * 7 + seed).astype(jnp.int32), "done": i % 2 == 0, "u8": jnp.uint8(200) + seed.astype(jnp.uint8),
                "half": {"f16": x.astype(jnp.float16), "bf16": x.astype(jnp.bfloat16)}, "hist": jnp.arange(3.0) * x, "const": 2.5, "none": None}  # fmt: skip

    def train(emit):
        def one(key, seed):
            def update(carry, i):
                emit(metrics_of(i, seed), jnp.int32(2**24 + 1) + i, seed)
                return carry, None

            return jax.lax.scan(update, 0.0, jnp.arange(3))[0]

        jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(0), SEEDS), jnp.arange(SEEDS))
        jax.effects_barrier()

    plain = SeedLogger(run={"root": str(tmp_path / "runs"), "name": "plain"}, backends={"use": ["memory"]})
    packed = SeedLogger(run={"root": str(tmp_path / "runs"), "name": "packed"}, backends={"use": ["memory"]})
    train(lambda metrics, step, seed: jax.debug.callback(plain, metrics, step=step, seed=seed))
    train(packed.callback)
    plain.close()
    packed.close()
    assert sorted(packed.runs) == sorted(plain.runs) == [0, 1, 2]
    for seed in range(SEEDS):
        expected, got = _journal(plain.runs[seed]), _journal(packed.runs[seed])
        assert got == expected and len(got) == 3 * 3, seed  # per update: "" scalars, "half" scalars, the histogram
        first = {(kind, namespace): data for kind, namespace, steps, data in got[:3]}
        assert got[0][2] == {"env_steps": 2**24 + 1}
        assert list(first["scalars", ""]) == ["ret", "n", "done", "u8", "const", "none"]  # as written
        assert first["scalars", ""]["none"] is None  # kept, as the plain callback keeps it (the `none` filter drops it)
        assert first["scalars", ""]["done"] == 1 and type(first["scalars", ""]["n"]) is int and first["scalars", ""]["u8"] == 200 + seed
        assert first["scalars", "half"]["bf16"] == float(jnp.bfloat16(0.1 + seed))
        assert first["histogram", ""]["hist"] == pytest.approx([0.0, 0.1 + seed, 0.2 + 2 * seed], rel=1e-6)
    for seed in range(SEEDS):  # the same counts, no conversion notice
        reports = [json.loads((log.runs[seed].run_dir / "report.json").read_text()) for log in (plain, packed)]
        assert reports[0]["counts"] == reports[1]["counts"] and not reports[1].get("converted"), reports

    stacked = SeedLogger(run={"root": str(tmp_path / "runs"), "name": "stacked"}, backends={"use": ["memory"]})
    jax.jit(lambda: stacked.callback({"ret": jnp.arange(3.0)}, step=jnp.int32(8), seed=jnp.arange(SEEDS)))()
    jax.effects_barrier()
    stacked.close()
    assert [_journal(stacked.runs[seed]) for seed in range(SEEDS)] == [[("scalars", "", {"env_steps": 8}, {"ret": float(seed)})] for seed in range(SEEDS)]


def test_per_seed_keys_in_one_run_and_arrays_as_histograms(tmp_path):
    log = SeedLogger(run={"root": str(tmp_path / "runs"), "name": "keys"}, backends={"use": ["memory"]}, per_seed="keys")
    for seed in range(2):
        log({"ret": jnp.float32(1.5 + seed), "hist": jnp.arange(3.0)}, step=jnp.int32(8), seed=jnp.int32(seed))
    log.close()
    (run,) = log.runs.values()
    events = list(read_journal(run.run_dir))
    scalars = [({e.tag(k): v for k, v in e.data.items()}, e.steps) for e in events if e.kind == "scalars"]
    assert scalars == [({"ret/seed0": 1.5}, {"env_steps": 8}), ({"ret/seed1": 2.5}, {"env_steps": 8})]
    histograms = [{e.tag(k): v for k, v in e.data.items()} for e in events if e.kind == "histogram"]
    assert histograms == [{"hist/seed0": [0.0, 1.0, 2.0]}, {"hist/seed1": [0.0, 1.0, 2.0]}]


def test_a_vmapped_loop_not_given_the_seed_is_warned_about_once(tmp_path):
    """What the issue saw: seeds interleaved in one series without a word. Now a warning says it, and the fix."""
    log = SeedLogger(run={"root": str(tmp_path / "runs"), "name": "noseed"}, backends={"use": ["memory"]})

    def train(key):
        def update(carry, i):
            jax.debug.callback(log, {"loss": jax.random.normal(jax.random.fold_in(key, i))}, step=i * BATCH)
            return carry, None

        return jax.lax.scan(update, 0.0, jnp.arange(2))[0]

    with pytest.warns(RuntimeWarning, match=r"'loss' arrived twice at env_steps=0 without a seed.*seed=seed") as caught:
        jax.jit(jax.vmap(train))(jax.random.split(jax.random.PRNGKey(0), SEEDS))
        jax.effects_barrier()
    log.close()
    assert len([w for w in caught if "arrived twice" in str(w.message)]) == 1
    assert len([e for e in read_journal(log.runs[None].run_dir) if e.kind == "scalars"]) == 2 * SEEDS  # every value kept


def test_a_value_without_the_seed_axis_is_a_clear_error(tmp_path):
    log = SeedLogger(run={"root": str(tmp_path / "runs"), "name": "bad"}, backends={"use": ["memory"]})
    with pytest.raises(ValueError, match="leading axis"):
        log({"ret": 1.0}, seed=jnp.arange(3))
    log({"ret": jnp.ones(1) * 2.0}, step=jnp.array([4]), seed=jnp.array([5.0]))  # one seed, batched; a float seed
    with pytest.raises(ValueError, match="per_seed"):
        SeedLogger(per_seed="seeds")
    log.close()
    assert [(e.data, e.steps) for e in read_journal(log.runs[5].run_dir) if e.kind == "scalars"] == [({"ret": 2.0}, {"env_steps": 4})]


def test_plain_each_gives_what_plain_gives_each_value():
    """`plain_each`, the callback's conversion in C, against `plain` of each value: one number a jax array of any
    dtype (bools as 0/1, int and float types kept), numpy scalars, 0-d and one-element arrays, and where one value
    is not a number (several values: an array; text, None, a big int) every value as `plain` makes it."""
    import numpy as np

    from rltrack.adapters.library_run import plain, plain_each

    numbers = [jnp.float32(0.1), jnp.int32(-3), jnp.uint8(7), jnp.bool_(True), jnp.float16(2.5), jnp.ones((1,)) * 4,
               np.float64(0.2), np.int64(5), np.array(1.5), 3, 2.0, None]  # fmt: skip
    mixed = [*numbers, jnp.arange(3.0), "text", 2**70, np.bool_(False), jnp.bfloat16(1.5)]
    for values in (numbers, mixed, [jnp.float32(1.0), jnp.arange(2)], [jnp.float32(1.0), "a"], []):
        expected = [plain(value) for value in values]
        got = plain_each(values)
        assert [type(v) for v in got] == [type(v) for v in expected]
        assert [v.tolist() if isinstance(v, np.ndarray) else v for v in got] == [v.tolist() if isinstance(v, np.ndarray) else v for v in expected]
    assert plain_each(numbers)[:6] == [float(np.float32(0.1)), -3, 7, 1, 2.5, 4.0]
