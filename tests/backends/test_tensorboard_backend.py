"""TensorBoard event files, read back with TensorBoard's own EventAccumulator.

Both places rltrack writes them are checked: `log/serial/` of the local
backend and `<logdir>/<run name>/` of the `tensorboard` backend.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import rltrack
from rltrack.core.refusals import STEP_BEYOND_64_BITS


def make(tmp_path: Path, backends: list[str], **settings: dict) -> rltrack.Logger:
    cfg = {"run": {"root": str(tmp_path / "runs"), "name": "tb"}, "backends": {"use": backends, **settings}}
    return rltrack.make_logger(cfg)


def accumulate(path: Path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def write_random_run(logger: rltrack.Logger, rng: np.random.Generator) -> dict[str, list[tuple[int, float]]]:
    """Three namespaces with different step axes; returns tag -> [(primary step, value)]."""
    expected: dict[str, list[tuple[int, float]]] = {}
    for i in range(20):
        loss, entropy = rng.normal(size=2)
        logger.write({"loss": loss, "entropy": np.float32(entropy)}, step={"train_iter": i, "env_steps": 64 * i}, namespace="learner")
        expected.setdefault("learner/loss", []).append((i, loss))
        expected.setdefault("learner/entropy", []).append((i, entropy))
        reward = float(rng.uniform(-100, 100))
        logger.write({"reward_mean": reward}, step={"env_steps": 64 * i}, namespace="collector")
        expected.setdefault("collector/reward_mean", []).append((64 * i, reward))
        if i % 5 == 4:
            logger.write({"episodes": i}, step=1000 + i, namespace="evaluator")  # a plain int step
            expected.setdefault("evaluator/episodes", []).append((1000 + i, i))
        logger.dump()
    return expected


def assert_scalars_equal(acc: EventAccumulator, expected: dict[str, list[tuple[int, float]]]) -> None:
    assert set(acc.Tags()["scalars"]) == set(expected)
    for tag, points in expected.items():
        got = scalars(acc, tag)
        assert [s for s, _ in got] == [s for s, _ in points], tag
        np.testing.assert_allclose([v for _, v in got], np.float32([v for _, v in points]), rtol=1e-6, err_msg=tag)


def test_local_backend_tfevents_hold_every_value_at_its_primary_step(tmp_path: Path) -> None:
    with make(tmp_path, ["local"]) as logger:
        expected = write_random_run(logger, np.random.default_rng(0))
    files = list((logger.run_dir / "log" / "serial").glob("events.out.tfevents.*"))
    assert len(files) == 1
    assert_scalars_equal(accumulate(logger.run_dir / "log" / "serial"), expected)


def test_histograms_are_readable_with_their_statistics(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    actions = rng.normal(3.0, 2.0, size=1000)
    weights = torch.randn(4, 25, dtype=torch.float64)
    with make(tmp_path, ["local"]) as logger:
        logger.write({"actions": actions}, step=7, namespace="collector")
        logger.write({"weights": weights}, step=8, namespace="learner")
    acc = accumulate(logger.run_dir / "log" / "serial")
    assert set(acc.Tags()["histograms"]) == {"collector/actions", "learner/weights"}
    for tag, step, values in (("collector/actions", 7, actions), ("learner/weights", 8, weights.numpy().ravel())):
        (event,) = acc.Histograms(tag)
        histo = event.histogram_value
        assert event.step == step
        assert histo.num == values.size
        assert histo.min == pytest.approx(values.min())
        assert histo.max == pytest.approx(values.max())
        assert histo.sum == pytest.approx(values.sum())
        assert histo.sum_squares == pytest.approx((values**2).sum())
        assert sum(histo.bucket) == values.size
        limits = list(histo.bucket_limit)
        assert limits == sorted(limits) and limits[-1] >= values.max()
        # each bucket counts the values between the previous limit and its own
        lower = [-math.inf, *limits[:-1]]
        counts = [np.count_nonzero((values >= lo) & (values < hi)) for lo, hi in zip(lower, limits)]
        counts[-1] += np.count_nonzero(values == limits[-1])
        assert list(histo.bucket) == pytest.approx(counts, abs=1)  # float rounding at an edge may move one value


def test_histogram_of_equal_values_and_of_non_finite_values(tmp_path: Path) -> None:
    with make(tmp_path, ["local"]) as logger:
        logger.write({"same": np.full(50, 4.0), "mixed": np.array([1.0, np.nan, 3.0, np.inf])}, step=1)
    acc = accumulate(logger.run_dir / "log" / "serial")
    same = acc.Histograms("same")[0].histogram_value
    assert (same.num, same.min, same.max, same.sum, sum(same.bucket)) == (50, 4.0, 4.0, 200.0, 50)
    assert list(same.bucket_limit) == sorted(same.bucket_limit) and same.bucket_limit[0] >= 4.0
    mixed = acc.Histograms("mixed")[0].histogram_value  # the finite values only
    assert (mixed.num, mixed.min, mixed.max, mixed.sum) == (2, 1.0, 3.0, 4.0)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # TensorBoard's compressor on the infinite limits
def test_histograms_of_values_near_the_double_limit(tmp_path: Path) -> None:
    with make(tmp_path, ["local"]) as logger:
        logger.write({"wide": np.array([-1e308, 0.0, 1e308]), "huge": np.array([1e308, 1e308])}, step=1)
    acc = accumulate(logger.run_dir / "log" / "serial")
    wide, huge = acc.Histograms("wide")[0].histogram_value, acc.Histograms("huge")[0].histogram_value
    assert (wide.num, wide.min, wide.max, wide.sum, sum(wide.bucket)) == (3, -1e308, 1e308, 0.0, 3)
    assert (huge.num, huge.sum, huge.sum_squares) == (2, math.inf, math.inf)
    assert "core.errors" not in (logger.run_dir / "report.json").read_text()


def test_non_finite_scalars_reach_tensorboard(tmp_path: Path) -> None:
    with make(tmp_path, ["local"]) as logger:
        logger.write({"a": math.nan, "b": math.inf, "c": -math.inf, "d": 2.5}, step=3)
        logger.write({"e": 1e300, "f": -1e39, "g": 10**400, "h": 3.0e38}, step=4)  # beyond float32, and a double
    acc = accumulate(logger.run_dir / "log" / "serial")
    (a,), (b,), (c,), (d,) = (acc.Scalars(t) for t in "abcd")
    assert math.isnan(a.value) and b.value == math.inf and c.value == -math.inf and d.value == 2.5
    assert {a.step, b.step, c.step, d.step} == {3}
    assert [acc.Scalars(t)[0].value for t in "efg"] == [math.inf, -math.inf, math.inf]
    assert acc.Scalars("h")[0].value == pytest.approx(3.0e38, rel=1e-6)
    assert "core.errors" not in (logger.run_dir / "report.json").read_text()


def test_steps_beyond_int64_are_left_out_counted_and_do_not_corrupt_the_file(tmp_path: Path) -> None:
    with make(tmp_path, ["local"]) as logger:
        logger.write({"a": 1.0}, step=2**70)
        logger.write({"a": 2.0}, step=-(2**70))
        logger.write({"a": 3.0}, step=-5)
        logger.write({"a": 4.0}, step=7)
    got = scalars(accumulate(logger.run_dir / "log" / "serial"), "a")
    assert got == [(-5, 3.0), (7, 4.0)]  # not clamped onto the largest step: left out, counted
    refused = json.loads((logger.run_dir / "report.json").read_text())["counts"]["files.refused"]
    assert sum(refused.values()) == 2 and all(STEP_BEYOND_64_BITS in reason for reason in refused)


def test_tensorboard_backend_writes_under_its_logdir(tmp_path: Path) -> None:
    logdir = tmp_path / "tensorboard"
    with make(tmp_path, ["tensorboard"], tensorboard={"logdir": str(logdir)}) as logger:
        expected = write_random_run(logger, np.random.default_rng(2))
        logger.write({"hist": np.arange(10.0)}, step=5)
    run_logdir = logdir / logger.run_dir.name
    assert len(list(run_logdir.glob("events.out.tfevents.*"))) == 1
    acc = accumulate(run_logdir)
    assert_scalars_equal(acc, expected)
    assert acc.Tags()["histograms"] == ["hist"]
    assert not (logger.run_dir / "log").exists()  # the local backend was not chosen


def test_tensorboard_backend_default_logdir_is_beside_the_runs(tmp_path: Path) -> None:
    with make(tmp_path, ["tensorboard"]) as logger:
        logger.write({"x": 1.0}, step=4)
    run_logdir = tmp_path / "runs" / "tensorboard" / logger.run_dir.name
    assert scalars(accumulate(run_logdir), "x") == [(4, 1.0)]


def test_tensorboard_backend_rejects_an_empty_logdir(tmp_path: Path) -> None:
    with pytest.raises(rltrack.ConfigError, match="logdir"):
        make(tmp_path, ["tensorboard"], tensorboard={"logdir": ""})


def test_tensorboard_and_local_backends_agree(tmp_path: Path) -> None:
    logdir = tmp_path / "tensorboard"
    with make(tmp_path, ["local", "tensorboard"], tensorboard={"logdir": str(logdir)}) as logger:
        expected = write_random_run(logger, np.random.default_rng(3))
    assert_scalars_equal(accumulate(logger.run_dir / "log" / "serial"), expected)
    assert_scalars_equal(accumulate(logdir / logger.run_dir.name), expected)


def test_runs_sharing_a_tensorboard_logdir_get_separate_files(tmp_path: Path) -> None:
    """Two runs of the same name under different roots, at the same second,
    must not append to (and interleave records in) one event file."""
    logdir = str(tmp_path / "tensorboard")
    first = rltrack.make_logger({"run": {"root": str(tmp_path / "a"), "name": "same"}, "backends": {"use": ["tensorboard"], "tensorboard": {"logdir": logdir}}})
    second = rltrack.make_logger({"run": {"root": str(tmp_path / "b"), "name": "same"}, "backends": {"use": ["tensorboard"], "tensorboard": {"logdir": logdir}}})
    for i in range(200):
        first.write({"first": float(i)}, step=i)
        second.write({"second": float(-i)}, step=i)
    first.close()
    second.close()
    files = sorted((tmp_path / "tensorboard" / "same").glob("events.out.tfevents.*"))
    assert len(files) == 2
    found = {}
    for path in files:
        acc = accumulate(path)
        (tag,) = acc.Tags()["scalars"]
        found[tag] = scalars(acc, tag)
    assert found == {"first": [(i, float(i)) for i in range(200)], "second": [(i, float(-i)) for i in range(200)]}


def test_c_crc32c_agrees_with_the_pure_python_fallback():
    import os

    from rltrack.sinks.tfevents import crc32c, crc32c_python

    assert crc32c_python(b"123456789") == 0xE3069283  # the CRC-32C check value
    for size in (0, 1, 7, 100, 4096):
        data = os.urandom(size)
        assert crc32c(data) == crc32c_python(data)


def test_tb_axes_write_each_value_against_both_axes_in_the_tensorboard_backend(tmp_path: Path) -> None:
    """`tb_axes = ["iter", "step"]`: `<ns>_iter/<key>` at train_iter, `<ns>_step/<key>`
    at env_steps, histograms too; a record on neither axis keeps `<ns>/<key>` at its primary step."""
    logdir = tmp_path / "tensorboard"
    rng = np.random.default_rng(11)
    with make(tmp_path, ["tensorboard"], tensorboard={"logdir": str(logdir), "tb_axes": ["iter", "step"]}) as logger:
        expected = write_random_run(logger, rng)
        logger.write({"weights": [1.0, 2.0, 3.0]}, step={"train_iter": 7, "env_steps": 448}, namespace="learner", kind="histogram")
    acc = accumulate(next((logdir / logger.run_dir.name).glob("events.out.tfevents.*")))
    axes = {"learner/": ("train_iter", "env_steps"), "collector/": (None, "env_steps")}
    renamed: dict[str, list[tuple[int, float]]] = {}
    for tag, points in expected.items():
        namespace, key = tag.split("/")
        if tag.startswith("evaluator/"):  # a plain "step" axis: neither iter nor step
            renamed[tag] = points
            continue
        iter_axis, step_axis = axes[namespace + "/"]
        if iter_axis:  # learner points are (train_iter, value) with env_steps = 64 * train_iter
            renamed[f"{namespace}_iter/{key}"] = points
        renamed[f"{namespace}_step/{key}"] = [(s * 64 if iter_axis else s, v) for s, v in points]
    assert_scalars_equal(acc, renamed)
    assert {"learner_iter/weights", "learner_step/weights"} <= set(acc.Tags()["histograms"])
    assert [e.step for e in acc.Histograms("learner_step/weights")] == [448]


def _tfrecords(path: Path) -> list[bytes]:
    """The payloads of a TFRecord file (length, masked CRC, data, masked CRC)."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 8], "little")
        out.append(data[pos + 12 : pos + 12 + length])
        pos += 16 + length
    return out


def test_scalar_events_are_byte_for_byte_what_tensorboards_protobufs_encode(tmp_path: Path) -> None:
    """A record's Summary is packed in one go from per-key-tuple layouts; the
    bytes are the ones TensorBoard's own `Event` proto serialises, for records
    whose keys repeat, change, hold None (skipped) or values beyond float32."""
    from tensorboard.compat.proto.event_pb2 import Event as EventProto
    from tensorboard.compat.proto.summary_pb2 import Summary

    from rltrack.sinks.tfevents import EventFileWriter
    from rltrack.core.events import Event

    rng = np.random.default_rng(5)
    steps = random.Random(5)
    keys = ["a", "loss/x", "reward_mean", "ünï", "k" * 200]
    records = []
    for i in range(300):
        chosen = [k for k in keys if rng.random() < 0.8] or ["a"]
        data: dict[str, float | int | None] = {k: float(rng.normal() * 10.0 ** rng.integers(-40, 40)) for k in chosen}
        if i % 7 == 0:
            data[chosen[0]] = [None, 3, -(10**400), 1e300, math.inf, -math.inf][i % 6]
        records.append((float(1.7e9 + i / 3), steps.randint(-(2**70), 2**70), data))
    records += [(1.8e9, 1, {"a": None}), (1.8e9, 2, {})]  # nothing to write: no event
    writer = EventFileWriter(tmp_path)
    for wall_time, step, data in records:
        writer.write(Event(wall_time, data, "scalars", "learner", {"env_steps": step}))
    writer.close()
    expected = []
    for wall_time, step, data in records:
        values = [Summary.Value(tag=f"learner/{k}", simple_value=_as_float32(v)) for k, v in data.items() if v is not None]
        if not values:
            continue
        step = min(max(step, -(2**63)), 2**63 - 1)
        expected.append(EventProto(wall_time=wall_time, step=step, summary=Summary(value=values)).SerializeToString())
    assert _tfrecords(writer.path)[1:] == expected


def _as_float32(value: float) -> float:
    """What a float32 field holds: beyond float32's range, +-inf (protobuf
    would round a double to float32 the same way for the rest)."""
    return float(np.float32(value)) if abs(value) <= 3.4028234663852886e38 else math.inf if value > 0 else -math.inf
