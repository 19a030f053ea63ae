"""Each filter against an independent numpy computation on random data, alone
(`Filter.apply`/`flush`/`tick` on `Event`s) and end to end through a Logger
with the memory backend, and the config order of filters respected."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rltrack
from rltrack.core.events import Event
from rltrack.filters import AggregateFilter, FilterChain, KeyFilter, NoneFilter, SmoothingFilter, TimeFilter
from rltrack.core.report import Report
from waiting import wait_until

STATS_NP = {"mean": np.mean, "std": np.std, "median": np.median, "min": np.min, "max": np.max}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """No ./runs, no git calls from the repo, no config leaking in from the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLTRACK_CONFIG", raising=False)
    monkeypatch.delenv("RLTRACK_BACKENDS", raising=False)


def ev(data, t=0.0, ns="", step=0):
    return Event(time=t, data=dict(data), namespace=ns, steps={"step": step})


def logger_with(tmp_path, filters):
    return rltrack.make_logger(
        {"run": {"root": str(tmp_path / "runs"), "name": "t"}, "filters": filters, "backends": {"use": ["memory"]}}
    )


def finish(logger):
    """Closes the logger; returns the memory backend after checking the journal
    holds exactly the events the backend received, in order."""
    assert logger.close(timeout=10)
    memory = logger.backends["memory"]
    journal = [e.to_dict() for e in rltrack.read_journal(logger.run_dir)]
    assert journal == [e.to_dict() for e in memory.events]
    return memory


def acme_smoothed(xs, coeff):
    """Closed form of the Acme-style warm-up: with c_k = coeff*(1 - 0.9**k),
    s_k = sum_j x_j (1 - c_j) prod_{i=j+1..k} c_i."""
    xs = np.asarray(xs, dtype=float)
    c = coeff * (1 - 0.9 ** np.arange(len(xs)))
    out = []
    for k in range(len(xs)):
        weights = np.array([(1 - c[j]) * np.prod(c[j + 1 : k + 1]) for j in range(k + 1)])
        out.append(float(weights @ xs[: k + 1]))
    return out


def debiased(xs, coeff):
    """Adam-style bias correction is a weighted average with weights coeff**age."""
    xs = np.asarray(xs, dtype=float)
    return [float(np.average(xs[: k + 1], weights=coeff ** np.arange(k, -1, -1.0))) for k in range(len(xs))]


def assert_stats(data, key, values, stats=STATS_NP):
    for stat, fn in stats.items():
        assert data[f"{key}_{stat}"] == pytest.approx(float(fn(np.asarray(values))), rel=1e-12, abs=1e-12), stat


# ---- NoneFilter --------------------------------------------------------------


def test_none_filter_drops_none_values_and_empty_records():
    rng = np.random.default_rng(0)
    report = Report()
    chain = FilterChain([NoneFilter()], report)
    kept, empty = [], 0
    for i in range(200):
        data = {f"k{j}": (None if rng.random() < 0.5 else float(rng.normal())) for j in range(3)}
        expected = {k: v for k, v in data.items() if v is not None}
        out = chain.process(ev(data, step=i))
        if expected:
            assert [e.data for e in out] == [expected]
            assert out[0].steps == {"step": i}
            kept.append(expected)
        else:
            assert out == []
            empty += 1
    assert empty > 0 and kept
    assert report.as_dict()["counts"]["core.filtered"] == {"NoneFilter": empty}


def test_none_filter_end_to_end(tmp_path):
    rng = np.random.default_rng(1)
    logger = logger_with(tmp_path, [{"type": "none"}])
    sent = []
    for i in range(50):
        data = {"a": None if rng.random() < 0.5 else float(rng.normal()), "b": None if i % 3 else float(i)}
        sent.append(data)
        logger.write(data, step=i, namespace="collector")
    memory = finish(logger)
    for key in ("a", "b"):
        assert memory.metrics[f"collector/{key}"] == [d[key] for d in sent if d[key] is not None]
        assert memory.steps[f"collector/{key}"] == [i for i, d in enumerate(sent) if d[key] is not None]
    empty = sum(1 for d in sent if d["a"] is None and d["b"] is None)
    assert len(memory.events) == len(sent) - empty
    assert logger.report.total("filtered") == empty


# ---- SmoothingFilter ---------------------------------------------------------


@pytest.mark.parametrize("coeff", [0.0, 0.5, 0.9, 0.99])
def test_smoothing_acme_warmup_matches_closed_form(coeff):
    xs = np.random.default_rng(2).normal(10, 3, size=60)
    filt = SmoothingFilter("reward", coeff=coeff)
    got = []
    for i, x in enumerate(xs):
        (out,) = filt.apply(ev({"reward": float(x), "loss": 1.0}, step=i))
        assert out.data["reward"] == float(x) and out.data["loss"] == 1.0  # originals pass
        assert "loss_smoothed" not in out.data
        got.append(out.data["reward_smoothed"])
    assert got[0] == xs[0]  # the first smoothed value is the value itself
    np.testing.assert_allclose(got, acme_smoothed(xs, coeff), rtol=1e-12)


@pytest.mark.parametrize("coeff", [0.0, 0.5, 0.9, 0.99])
def test_smoothing_debias_warmup_is_a_weighted_average(coeff):
    xs = np.random.default_rng(3).uniform(-5, 5, size=60)
    filt = SmoothingFilter("reward", coeff=coeff, warmup="debias")
    got = [filt.apply(ev({"reward": float(x)}))[0].data["reward_smoothed"] for x in xs]
    np.testing.assert_allclose(got, debiased(xs, coeff), rtol=1e-10)


def test_smoothing_state_is_per_namespace_and_key_and_skips_non_finite():
    rng = np.random.default_rng(4)
    filt = SmoothingFilter(r"^r", coeff=0.9)
    series = {(ns, key): [] for ns in ("collector", "evaluator") for key in ("r1", "r2")}
    for i in range(40):
        ns = "collector" if rng.random() < 0.5 else "evaluator"
        data = {"r1": float(rng.normal()), "r2": float(rng.normal())}
        if i % 7 == 0:  # a bad value passes on but does not enter the average
            data["r2"] = math.nan if i % 2 else None
        (out,) = filt.apply(ev(data, ns=ns))
        for key in ("r1", "r2"):
            value = data[key]
            if value is None or math.isnan(value):
                assert f"{key}_smoothed" not in out.data
                assert out.data[key] is value
                continue
            series[(ns, key)].append(value)
            assert out.data[f"{key}_smoothed"] == pytest.approx(acme_smoothed(series[(ns, key)], 0.9)[-1], rel=1e-12)


def test_smoothing_end_to_end_both_warmups(tmp_path):
    rng = np.random.default_rng(5)
    returns, lengths = rng.normal(size=30), rng.integers(1, 500, size=30)
    logger = logger_with(
        tmp_path,
        [
            {"type": "smoothing", "regex": "return", "coeff": 0.8},
            {"type": "smoothing", "regex": "length$", "coeff": 0.95, "warmup": "debias"},
        ],
    )
    for i, (ret, length) in enumerate(zip(returns, lengths)):
        logger.write({"episode_return": float(ret), "episode_length": int(length), "fps": 1.0}, step=i, namespace="evaluator")
    memory = finish(logger)
    np.testing.assert_array_equal(memory.metrics["evaluator/episode_return"], returns)
    np.testing.assert_array_equal(memory.metrics["evaluator/episode_length"], lengths)
    np.testing.assert_allclose(memory.metrics["evaluator/episode_return_smoothed"], acme_smoothed(returns, 0.8), rtol=1e-12)
    np.testing.assert_allclose(memory.metrics["evaluator/episode_length_smoothed"], debiased(lengths, 0.95), rtol=1e-10)
    assert memory.steps["evaluator/episode_return_smoothed"] == list(range(30))
    assert set(memory.metrics) == {f"evaluator/{k}" for k in ("episode_return", "episode_length", "fps", "episode_return_smoothed", "episode_length_smoothed")}


# ---- AggregateFilter ---------------------------------------------------------


def test_aggregate_passthrough_holds_matching_keys_until_flush():
    rng = np.random.default_rng(7)
    filt = AggregateFilter("loss")
    losses, rewards = [], []
    for i in range(100):
        loss, reward = float(rng.normal(2, 1)), float(rng.normal())
        losses.append(loss)
        rewards.append(reward)
        out = filt.apply(ev({"total_loss": loss, "reward": reward}, step=i, ns="learner"))
        assert [e.data for e in out] == [{"reward": reward}]  # non-matching keys flow on at once
    (emitted,) = filt.flush({"step": 999}, now=5.0)
    assert set(emitted.data) == {f"total_loss_{s}" for s in STATS_NP}
    assert_stats(emitted.data, "total_loss", losses)
    assert emitted.steps == {"step": 999} and emitted.time == 5.0 and emitted.namespace == "learner"
    assert filt.flush(None, now=6.0) == []  # the window was emptied


def test_aggregate_without_passthrough_emits_last_values_of_other_keys():
    rng = np.random.default_rng(8)
    filt = AggregateFilter("loss", stats=["mean", "max", "sum", "count"], passthrough=False)
    values = rng.normal(size=(20, 2))
    for i, (loss, other) in enumerate(values):
        assert filt.apply(ev({"loss": float(loss), "epoch": i, "lr": float(other)}, step=i)) == []
    (emitted,) = filt.flush(None, now=1.0)
    assert emitted.data["epoch"] == 19 and emitted.data["lr"] == float(values[-1, 1])
    assert emitted.data["loss_count"] == 20
    assert emitted.data["loss_sum"] == pytest.approx(float(np.sum(values[:, 0])), rel=1e-12)
    assert_stats(emitted.data, "loss", values[:, 0], {"mean": np.mean, "max": np.max})
    assert emitted.steps == {"step": 19}  # no dump step: the last steps seen


@pytest.mark.parametrize("every", [1, 3, 7])
def test_aggregate_every_n_records(every):
    xs = np.random.default_rng(9).normal(size=50)
    filt = AggregateFilter("loss", every=every)
    emitted = []
    for i, x in enumerate(xs):
        emitted += filt.apply(ev({"loss": float(x)}, step=i))
    emitted += filt.flush(None, now=0.0)
    chunks = [xs[i : i + every] for i in range(0, len(xs), every)]
    assert len(emitted) == len(chunks)
    for event, chunk, start in zip(emitted, chunks, range(0, len(xs), every)):
        assert_stats(event.data, "loss", chunk)
        assert event.steps == {"step": min(start + every, len(xs)) - 1}


def test_aggregate_every_seconds_counts_from_the_first_value_of_a_window():
    xs = np.random.default_rng(10).normal(size=9)
    filt = AggregateFilter("loss", seconds=1.0, stats=["mean", "count"])
    times = [100.0, 100.4, 100.9, 101.0, 101.5, 150.0, 150.5, 150.9, 151.2]
    emitted = []
    for t, x in zip(times, xs):
        emitted += filt.apply(ev({"loss": float(x)}, t=t))
    # windows are [first value, first value + 1 s): 101.0 opens the second one, and
    # 150.0, after a quiet spell with no tick, closes it rather than joining it
    assert [e.data["loss_count"] for e in emitted] == [3, 2, 3]
    assert [e.time for e in emitted] == [101.0, 150.0, 151.2]
    for event, chunk in zip(emitted, (xs[:3], xs[3:5], xs[5:8])):
        assert event.data["loss_mean"] == pytest.approx(np.mean(chunk), rel=1e-12)
    assert filt.tick(151.3) == []  # the window holding 151.2 opened 0.1 s ago
    (late,) = filt.tick(152.2)
    assert late.data == {"loss_mean": float(xs[8]), "loss_count": 1} and late.time == 152.2
    assert filt.tick(200.0) == [] and filt.flush(None, 200.0) == []
    filt.apply(ev({"loss": 1.0}, t=300.0))  # a value long after the last emission starts its own window
    assert filt.tick(300.5) == []


def test_aggregate_windows_are_per_namespace():
    rng = np.random.default_rng(11)
    filt = AggregateFilter("loss", every=5)
    seen = {"learner": [], "collector": []}
    emitted = []
    for i in range(60):
        ns = "learner" if rng.random() < 0.6 else "collector"
        x = float(rng.normal())
        seen[ns].append(x)
        emitted += filt.apply(ev({"loss": x}, ns=ns, step=i))
    emitted += filt.flush(None, now=0.0)
    for ns, xs in seen.items():
        mine = [e for e in emitted if e.namespace == ns]
        assert len(mine) == math.ceil(len(xs) / 5)
        for k, event in enumerate(mine):
            assert_stats(event.data, "loss", xs[5 * k : 5 * k + 5])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40), st.sampled_from(["", "learner"]))
def test_aggregate_matches_numpy_on_any_finite_values(xs, namespace):
    filt = AggregateFilter("v", stats=["mean", "std", "median", "min", "max", "sum", "count"])
    for x in xs:
        assert filt.apply(ev({"v": x}, ns=namespace)) == []
    (out,) = filt.flush(None, 0.0)
    arr = np.asarray(xs)
    for stat, fn in {**STATS_NP, "sum": np.sum}.items():
        assert out.data[f"v_{stat}"] == pytest.approx(float(fn(arr)), rel=1e-9, abs=1e-6), stat
    assert out.data["v_count"] == len(xs) and out.namespace == namespace


def test_aggregate_special_values_match_numpy_and_do_not_raise():
    """inf + -inf and overflow made math.fsum raise, which stopped the pipeline thread."""
    cases = [[math.inf, -math.inf], [1e308, 1e308], [1e200, -1e200], [1.0, math.nan, 0.0], [math.inf, 1.0], [-0.0]]
    for xs in cases:
        filt = AggregateFilter("x")
        for x in xs:
            filt.apply(ev({"x": x}))
        (out,) = filt.flush(None, 0.0)
        with np.errstate(all="ignore"):
            for stat, fn in STATS_NP.items():
                expected = fn(np.asarray(xs))
                np.testing.assert_allclose(out.data[f"x_{stat}"], expected, rtol=0, atol=0, err_msg=f"{stat} of {xs}")


def test_ints_beyond_a_double_neither_smoothing_nor_aggregate_lose_the_record(tmp_path):
    """float(10**400) raises: that used to stop the record in the filters (counted
    as an error, never journaled). Now it counts as +-inf: smoothing skips it
    as non-finite, aggregate's statistics hold it as inf."""
    logger = logger_with(
        tmp_path, [{"type": "smoothing", "regex": "reward"}, {"type": "aggregate", "regex": "loss", "stats": ["mean", "max"]}]
    )
    logger.write({"reward": 10**400, "x": 1.0}, step=1)
    logger.write({"reward": 2.0}, step=2)
    logger.write({"loss": -(10**400)}, step=3)
    logger.write({"loss": 1.0}, step=4)
    memory = finish(logger)
    assert memory.metrics["reward"] == [10**400, 2.0] and memory.metrics["reward_smoothed"] == [2.0]
    assert memory.metrics["loss_mean"] == [-math.inf] and memory.metrics["loss_max"] == [1.0]
    assert "errors" not in (logger.run_dir / "report.json").read_text()


def test_aggregate_end_to_end_passthrough_and_dump_steps(tmp_path):
    rng = np.random.default_rng(12)
    logger = logger_with(tmp_path, [{"type": "aggregate", "regex": "loss"}])
    epochs = []
    for epoch in range(3):
        losses = rng.normal(1, 0.5, size=int(rng.integers(5, 20)))
        for i, x in enumerate(losses):
            logger.write({"policy_loss": float(x), "reward": float(i)}, step=100 * epoch + i, namespace="learner")
        logger.dump(step={"train_iter": epoch})
        epochs.append(losses)
    memory = finish(logger)
    for stat, fn in STATS_NP.items():
        got = memory.metrics[f"learner/policy_loss_{stat}"]
        np.testing.assert_allclose(got, [fn(xs) for xs in epochs], rtol=1e-12, atol=1e-12)
    assert memory.steps["learner/policy_loss_mean"] == [0, 1, 2]
    aggregated = [e for e in memory.events if "policy_loss_mean" in e.data]
    assert [e.steps for e in aggregated] == [{"train_iter": k} for k in range(3)]
    assert memory.metrics["learner/reward"] == [float(i) for xs in epochs for i in range(len(xs))]
    assert "learner/policy_loss" not in memory.metrics


def test_aggregate_end_to_end_without_passthrough_is_store_then_log(tmp_path):
    rng = np.random.default_rng(13)
    logger = logger_with(tmp_path, [{"type": "aggregate", "regex": "Q", "stats": ["mean", "min", "max"], "passthrough": False}])
    rows = []
    for epoch in range(4):
        qs = rng.normal(size=10)
        for x in qs:
            logger.write({"QVals": float(x), "Epoch": epoch}, step=epoch)
        logger.dump()
        rows.append(qs)
    logger.write({"QVals": 1.5, "Epoch": 4}, step=4)  # left for close to emit
    rows.append(np.array([1.5]))
    memory = finish(logger)
    assert len(memory.events) == 5  # one record per dump, nothing in between
    assert memory.metrics["Epoch"] == [0, 1, 2, 3, 4]
    for stat in ("mean", "min", "max"):
        np.testing.assert_allclose(memory.metrics[f"QVals_{stat}"], [STATS_NP[stat](q) for q in rows], rtol=1e-12)


def test_aggregate_end_to_end_every(tmp_path):
    xs = np.random.default_rng(14).normal(size=23)
    logger = logger_with(tmp_path, [{"type": "aggregate", "regex": "loss", "every": 5, "stats": ["mean", "std"]}])
    for i, x in enumerate(xs):
        logger.write({"loss": float(x)}, step=i)
    memory = finish(logger)  # 4 full windows, then the rest at close
    chunks = [xs[i : i + 5] for i in range(0, 23, 5)]
    np.testing.assert_allclose(memory.metrics["loss_mean"], [np.mean(c) for c in chunks], rtol=1e-12)
    np.testing.assert_allclose(memory.metrics["loss_std"], [np.std(c) for c in chunks], rtol=1e-12, atol=1e-15)
    assert memory.steps["loss_mean"] == [4, 9, 14, 19, 22]


def test_aggregate_end_to_end_seconds_emits_without_a_dump(tmp_path):
    rng = np.random.default_rng(15)
    first, second = rng.normal(size=4), rng.normal(size=3)
    logger = logger_with(tmp_path, [{"type": "aggregate", "regex": "loss", "seconds": 0.2, "stats": ["mean", "count"]}])
    memory = logger.backends["memory"]
    for x in first:
        logger.write({"loss": float(x)}, namespace="learner")
    wait_until(lambda: "learner/loss_mean" in memory.metrics, 30, "the 0.2 s aggregate to emit without a dump", every=0.02)
    assert memory.metrics["learner/loss_count"] == [4]
    for x in second:
        logger.write({"loss": float(x)}, namespace="learner")
    finish(logger)
    assert memory.metrics["learner/loss_count"] == [4, 3]
    np.testing.assert_allclose(memory.metrics["learner/loss_mean"], [np.mean(first), np.mean(second)], rtol=1e-12)


def test_aggregate_end_to_end_per_namespace(tmp_path):
    rng = np.random.default_rng(16)
    logger = logger_with(tmp_path, [{"type": "aggregate", "regex": "reward"}])
    sent = {"collector": [], "evaluator": []}
    for i in range(40):
        ns = "collector" if i % 3 else "evaluator"
        x = float(rng.normal())
        sent[ns].append(x)
        logger.write({"reward": x}, step=i, namespace=ns)
    logger.dump()
    memory = finish(logger)
    for ns, xs in sent.items():
        for stat, fn in STATS_NP.items():
            assert memory.metrics[f"{ns}/reward_{stat}"] == [pytest.approx(float(fn(xs)), rel=1e-12)]
    assert {e.namespace for e in memory.events} == {"collector", "evaluator"}


# ---- TimeFilter --------------------------------------------------------------


def forwarded_times(times, seconds):
    """The spec: forward if at least `seconds` passed since the last forwarded one."""
    out, last = [], None
    for t in times:
        if last is None or t - last >= seconds:
            out.append(t)
            last = t
    return out


def test_time_filter_per_namespace():
    rng = np.random.default_rng(17)
    times = np.cumsum(rng.exponential(0.1, size=300))
    namespaces = rng.choice(["collector", "learner", ""], size=300)
    report = Report()
    chain = FilterChain([TimeFilter(0.5)], report)
    got = {ns: [] for ns in ("collector", "learner", "")}
    for t, ns in zip(times, namespaces):
        for event in chain.process(ev({"x": float(t)}, t=float(t), ns=str(ns))):
            got[event.namespace].append(event.time)
    for ns, forwarded in got.items():
        assert forwarded == forwarded_times([float(t) for t, n in zip(times, namespaces) if n == ns], 0.5)
    assert report.total("filtered") == 300 - sum(map(len, got.values()))


def test_time_filter_survives_the_clock_being_set_back():
    filt = TimeFilter(10.0)
    times = [1000.0, 1005.0, 1011.0, 40.0, 45.0, 51.0, 1012.0]  # the clock jumped back by ~970 s
    forwarded = [t for t in times if filt.apply(ev({"x": t}, t=t))]
    assert forwarded == [1000.0, 1011.0, 40.0, 51.0, 1012.0]


def test_time_filter_zero_seconds_forwards_every_record(tmp_path):
    """`seconds = 0` is Acme's `TimeFilter(time_delta=0)`: no throttling, even
    for records captured at the same instant or with the clock set back."""
    start = time.time()
    times = [start, start, start + 0.001, start - 5.0, start + 0.002]
    logger = logger_with(tmp_path, [{"type": "time", "seconds": 0}])
    for i, t in enumerate(times):
        logger.emit(Event(time=t, data={"i": i}, namespace="learner", steps={"env_steps": i}))
    memory = finish(logger)
    assert [e.time for e in memory.events] == times
    assert memory.metrics["learner/i"] == [0, 1, 2, 3, 4]
    assert logger.report.total("filtered") == 0


def test_time_filter_end_to_end_per_namespace(tmp_path):
    rng = np.random.default_rng(18)
    start = time.time()
    times = start + np.cumsum(rng.uniform(0, 0.3, size=80))
    logger = logger_with(tmp_path, [{"type": "time", "seconds": 1.0}])
    sent = []
    for i, t in enumerate(times):
        ns = "collector" if i % 2 else "evaluator"
        sent.append((ns, float(t)))
        logger.emit(Event(time=float(t), data={"i": i}, namespace=ns, steps={"env_steps": i}))
    memory = finish(logger)
    for ns in ("collector", "evaluator"):
        expected = forwarded_times([t for n, t in sent if n == ns], 1.0)
        assert [e.time for e in memory.events if e.namespace == ns] == expected


# ---- KeyFilter ---------------------------------------------------------------


@pytest.mark.parametrize(("keep", "drop"), [("loss", None), (None, "^time/"), ("^train/", "entropy"), ("zzz", None)])
def test_key_filter_keep_and_drop(keep, drop):
    rng = np.random.default_rng(19)
    pool = ["train/loss", "train/entropy_loss", "train/lr", "time/fps", "rollout/ep_rew_mean", "loss"]
    filt = KeyFilter(keep=keep, drop=drop)
    for _ in range(50):
        keys = rng.choice(pool, size=int(rng.integers(1, len(pool))), replace=False)
        data = {str(k): float(rng.normal()) for k in keys}
        expected = {
            k: v
            for k, v in data.items()
            if (keep is None or re.search(keep, k)) and (drop is None or not re.search(drop, k))
        }
        out = filt.apply(ev(data))
        assert [e.data for e in out] == ([expected] if expected else [])


def test_key_filter_end_to_end(tmp_path):
    logger = logger_with(tmp_path, [{"type": "keys", "keep": "^(train|rollout)/", "drop": "entropy"}])
    for i in range(5):
        logger.write({"train/loss": i, "train/entropy_loss": -i, "time/fps": 100, "rollout/ep_rew_mean": 2 * i}, step=i)
    logger.write({"time/fps": 100}, step=5)  # left empty: dropped
    memory = finish(logger)
    assert memory.metrics == {"train/loss": [0, 1, 2, 3, 4], "rollout/ep_rew_mean": [0, 2, 4, 6, 8]}
    assert logger.report.as_dict()["counts"]["core.filtered"] == {"KeyFilter": 1}


# ---- order from config -------------------------------------------------------


def test_smoothing_then_aggregate_aggregates_the_smoothed_series(tmp_path):
    xs = np.random.default_rng(20).normal(size=25)
    logger = logger_with(
        tmp_path,
        [{"type": "smoothing", "regex": "loss", "coeff": 0.9}, {"type": "aggregate", "regex": "loss", "stats": ["mean", "max"]}],
    )
    for i, x in enumerate(xs):
        logger.write({"loss": float(x)}, step=i)
    logger.dump()
    memory = finish(logger)
    smoothed = acme_smoothed(xs, 0.9)
    assert memory.metrics["loss_mean"] == [pytest.approx(np.mean(xs), rel=1e-12)]
    assert memory.metrics["loss_smoothed_mean"] == [pytest.approx(np.mean(smoothed), rel=1e-12)]
    assert memory.metrics["loss_smoothed_max"] == [pytest.approx(np.max(smoothed), rel=1e-12)]
    assert "loss_smoothed" not in memory.metrics and "loss_mean_smoothed" not in memory.metrics


def test_aggregate_then_smoothing_smooths_the_aggregates(tmp_path):
    rng = np.random.default_rng(21)
    logger = logger_with(
        tmp_path,
        [{"type": "aggregate", "regex": "loss", "stats": ["mean"]}, {"type": "smoothing", "regex": "loss", "coeff": 0.9}],
    )
    means = []
    for epoch in range(6):
        xs = rng.normal(size=8)
        means.append(float(np.mean(xs)))
        for x in xs:
            logger.write({"loss": float(x)}, step=epoch)
        logger.dump()
    memory = finish(logger)
    np.testing.assert_allclose(memory.metrics["loss_mean"], means, rtol=1e-12)
    np.testing.assert_allclose(memory.metrics["loss_mean_smoothed"], acme_smoothed(means, 0.9), rtol=1e-12)
    assert "loss_smoothed_mean" not in memory.metrics


def test_time_before_aggregate_aggregates_only_forwarded_records(tmp_path):
    xs = np.random.default_rng(22).normal(size=30)
    start = time.time()
    logger = logger_with(tmp_path, [{"type": "time", "seconds": 1.0}, {"type": "aggregate", "regex": "loss", "stats": ["mean", "count"]}])
    for i, x in enumerate(xs):  # one record every 0.25 s: every 4th passes
        logger.emit(Event(time=start + 0.25 * i, data={"loss": float(x)}, steps={"step": i}))
    logger.dump()
    memory = finish(logger)
    assert memory.metrics["loss_count"] == [len(xs[::4])]
    assert memory.metrics["loss_mean"] == [pytest.approx(np.mean(xs[::4]), rel=1e-12)]


def test_aggregate_before_time_lets_the_time_filter_drop_the_aggregate(tmp_path):
    xs = np.random.default_rng(23).normal(size=10)
    chain = [{"type": "aggregate", "regex": "loss", "stats": ["mean"]}, {"type": "time", "seconds": 60}]
    logger = logger_with(tmp_path, chain)
    for i, x in enumerate(xs):
        logger.write({"loss": float(x), "reward": float(i)}, step=i, namespace="learner")
    logger.dump()
    memory = finish(logger)
    # the first record's reward went through the time filter; everything after it in
    # that minute is dropped, including the aggregate emitted at dump
    assert memory.metrics == {"learner/reward": [0.0]}
    assert logger.report.as_dict()["counts"]["core.filtered"] == {"TimeFilter": len(xs)}

    logger = logger_with(tmp_path, list(reversed(chain)))
    for i, x in enumerate(xs):
        logger.write({"loss": float(x), "reward": float(i)}, step=i, namespace="learner")
    logger.dump()
    memory = finish(logger)
    assert memory.metrics == {"learner/reward": [0.0], "learner/loss_mean": [float(xs[0])]}
