"""values.normalize: what a training loop hands over becomes what every backend
can take, and every conversion, route, rename and drop is counted."""

from __future__ import annotations

import ast
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rltrack
from rltrack.core.events import Event
from rltrack.core.report import Report
from rltrack.core.values import literal, normalize


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLTRACK_CONFIG", raising=False)
    monkeypatch.delenv("RLTRACK_BACKENDS", raising=False)


def norm(data, kind="scalars"):
    report = Report()
    out = normalize(Event(time=1.0, data=data, kind=kind, namespace="learner", steps={"step": 7}), report)
    return {e.kind: e for e in out}, report


class ArrayLike:
    """Speaks only numpy's `__array__` protocol, as TensorFlow tensors do."""

    def __init__(self, value):
        self.value = value

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype=dtype)


def test_numpy_scalars_and_0d_arrays_become_python_numbers():
    data = {
        "f64": np.float64(0.1),
        "f32": np.float32(0.25),
        "f16": np.float16(1.5),
        "i64": np.int64(2**40),
        "u8": np.uint8(255),
        "b": np.bool_(True),
        "a0f": np.array(3.5),
        "a0i": np.array(-4),
        "py_bool": False,
        "py_int": 5,
        "py_float": 2.5,
    }
    by_kind, report = norm(data)
    assert set(by_kind) == {"scalars"}
    out = by_kind["scalars"].data
    assert out == {
        "f64": 0.1, "f32": 0.25, "f16": 1.5, "i64": 2**40, "u8": 255, "b": 1,
        "a0f": 3.5, "a0i": -4, "py_bool": 0, "py_int": 5, "py_float": 2.5,
    }  # fmt: skip
    assert {k: type(v) for k, v in out.items()} == {
        "f64": float, "f32": float, "f16": float, "i64": int, "u8": int, "b": int,
        "a0f": float, "a0i": int, "py_bool": int, "py_int": int, "py_float": float,
    }  # fmt: skip
    # everything but the plain int and float was converted, each counted once
    assert report.total("converted") == 9
    assert report.total("routed") == report.total("dropped") == 0
    json.dumps(out)  # plain JSON, no numpy types left


def test_torch_0d_tensors_become_python_numbers():
    data = {
        "loss": torch.tensor(0.5, requires_grad=True) * 2,
        "count": torch.tensor(3),
        "flag": torch.tensor(True),
        "half": torch.tensor(0.25, dtype=torch.float16),
    }
    by_kind, report = norm(data)
    assert by_kind["scalars"].data == {"loss": 1.0, "count": 3, "flag": 1, "half": 0.25}
    assert report.as_dict()["counts"]["core.converted"] == {"Tensor -> float": 2, "Tensor -> int": 2}


def test_arrays_tensors_and_number_lists_become_histograms():
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(3, 4))
    data = {
        "actions": np.arange(6),
        "q": matrix,
        "grads": torch.from_numpy(matrix.copy()).requires_grad_(),
        "list": [1, 2.5, np.float32(3)],
        "nested": ((1, 2), [3]),
        "tf_like": ArrayLike([0.5, 1.5]),
        "reward": 1.0,
    }
    by_kind, report = norm(data)
    assert by_kind["scalars"].data == {"reward": 1.0}
    hist = by_kind["histogram"]
    assert hist.namespace == "learner" and hist.steps == {"step": 7} and hist.time == 1.0
    assert hist.data == {
        "actions": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        "q": matrix.ravel().tolist(),
        "grads": matrix.ravel().tolist(),
        "list": [1.0, 2.5, 3.0],
        "nested": [1.0, 2.0, 3.0],
        "tf_like": [0.5, 1.5],
    }
    assert all(type(v) is float for values in hist.data.values() for v in values)
    assert report.total("routed") == 6
    assert report.as_dict()["counts"]["core.routed"] == {
        "ndarray -> histogram": 2,
        "ArrayLike -> histogram": 1,  # the report names the type the user passed
        "Tensor -> histogram": 1,
        "list -> histogram": 1,
        "tuple -> histogram": 1,
    }


def test_one_element_arrays_and_tensors_are_scalars_as_tensorboard_takes_them():
    """CleanRL hands `add_scalar` each episode's return as a one-element array:
    TensorBoard writes it as a scalar, and so does rltrack for every adapter."""
    data = {"ret": np.array([2.5]), "len": np.array([[7]]), "t": torch.tensor([1.5]), "t0": torch.tensor(3), "pair": np.array([1.0, 2.0]), "lst": [4.0]}
    by_kind, report = norm(data)
    assert by_kind["scalars"].data == {"ret": 2.5, "len": 7, "t": 1.5, "t0": 3}
    assert by_kind["histogram"].data == {"pair": [1.0, 2.0], "lst": [4.0]}
    assert report.as_dict()["counts"]["core.converted"] == {"ndarray -> float": 1, "ndarray -> int": 1, "Tensor -> float": 1, "Tensor -> int": 1}


def test_array_protocol_0d_is_a_number():
    by_kind, report = norm({"x": ArrayLike(2.5)})
    assert by_kind["scalars"].data == {"x": 2.5}
    assert report.as_dict()["counts"]["core.converted"] == {"ArrayLike -> float": 1}


class Hostile:
    """Looks like an array and raises on every conversion."""

    size = 1
    ndim = 0

    def item(self):
        raise KeyError("no")

    def tolist(self):
        raise MemoryError("no")


def test_values_that_raise_on_conversion_are_dropped_and_counted():
    by_kind, report = norm({"bad": Hostile(), "ok": 1.0})
    assert by_kind["scalars"].data == {"ok": 1.0}
    assert report.as_dict()["counts"]["core.dropped"] == {"bad: converting Hostile raised KeyError": 1}
    by_kind, report = norm({"bad": Hostile(), "ok": [1]}, kind="histogram")
    assert by_kind["histogram"].data == {"ok": [1.0]}
    assert report.as_dict()["counts"]["core.dropped"] == {"bad: no histogram values in Hostile": 1}


def test_strings_and_bytes_become_text():
    by_kind, report = norm({"status": "ok", "raw": b"caf\xc3\xa9", "bad": b"\xff", "r": 1})
    assert by_kind["text"].data == {"status": "ok", "raw": "café", "bad": "\ufffd"}
    assert by_kind["text"].steps == {"step": 7} and by_kind["text"].namespace == "learner"
    assert by_kind["scalars"].data == {"r": 1}
    assert report.as_dict()["counts"]["core.routed"] == {"str -> text": 1, "bytes -> text": 2}


def test_none_is_kept_for_the_none_filter():
    by_kind, report = norm({"a": None, "b": 1.0})
    assert by_kind["scalars"].data == {"a": None, "b": 1.0}
    assert report.as_dict()["counts"] == {}
    by_kind, _ = norm({"a": None})
    assert by_kind["scalars"].data == {"a": None}


def test_nested_dicts_are_flattened_with_slashes():
    data = {"train": {"loss": 1.0, "opt": {"lr": np.float32(0.5), "betas": [0.9, 0.99]}}, "top": 2}
    by_kind, _ = norm(data)
    assert by_kind["scalars"].data == {"train/loss": 1.0, "train/opt/lr": 0.5, "top": 2}
    assert by_kind["histogram"].data == {"train/opt/betas": [0.9, 0.99]}


def test_non_str_keys_are_renamed_and_recorded():
    data = {1: 1.0, (2, 3): 2.0, "": 3.0, "ok": 4.0, "sub": {5: 6.0, None: 7.0}}
    by_kind, report = norm(data)
    assert by_kind["scalars"].data == {
        "1": 1.0, "(2, 3)": 2.0, "_empty_key": 3.0, "ok": 4.0, "sub/5": 6.0, "sub/None": 7.0,
    }  # fmt: skip
    assert report.as_dict()["renamed"] == {
        "core": {"1 (int)": "1", "(2, 3) (tuple)": "(2, 3)", "'' (str)": "_empty_key", "5 (int)": "5", "None (NoneType)": "None"}
    }


def test_values_without_conversion_are_dropped_and_counted():
    data = {
        "obj": object(),
        "cplx": 1 + 2j,
        "set": {1, 2},
        "with_none": [1.0, None],
        "mixed": [1.0, "a"],
        "strs": np.array(["a", "b"]),
        "empty": np.array([]),
        "empty_list": [],
        "empty_t": torch.zeros(0),
        "keep": 1.0,
    }
    by_kind, report = norm(data)
    assert list(by_kind) == ["scalars"]
    assert by_kind["scalars"].data == {"keep": 1.0}
    assert report.total("dropped") == 9
    assert report.as_dict()["counts"]["core.dropped"] == {
        "obj: no numeric conversion for object": 1,
        "cplx: no numeric conversion for complex": 1,
        "set: no numeric conversion for set": 1,
        "with_none: no numeric conversion for list": 1,
        "mixed: no numeric conversion for list": 1,
        "strs: no numeric conversion for ndarray": 1,
        "empty: empty ndarray": 1,
        "empty_list: empty list": 1,
        "empty_t: empty Tensor": 1,
    }


def test_a_record_of_nothing_usable_yields_no_event():
    by_kind, report = norm({"obj": object()})
    assert by_kind == {}
    assert report.total("dropped") == 1


def test_explicit_histogram_records_hold_lists_of_floats():
    by_kind, report = norm({"h": np.arange(3), "t": torch.ones(2, 2), "n": np.float32(2), "bad": "x", "e": []}, kind="histogram")
    assert by_kind["histogram"].data == {"h": [0.0, 1.0, 2.0], "t": [1.0] * 4, "n": [2.0]}
    assert report.as_dict()["counts"]["core.dropped"] == {
        "bad: no histogram values in str": 1,
        "e: no histogram values in list": 1,
    }
    assert norm({"bad": object()}, kind="histogram")[0] == {}


def test_timing_records_are_normalised_like_scalars():
    by_kind, report = norm({"rollout": np.float64(0.25), "note": "slow"}, kind="timing")
    assert by_kind["timing"].data == {"rollout": 0.25}
    assert by_kind["text"].data == {"note": "slow"}
    assert report.total("converted") == 1 and report.total("routed") == 1


def test_hparams_and_text_are_literal_safe():
    hparams = {
        "lr": 1e-3,
        "gamma": np.float32(0.5),
        "clip": np.float64(0.2),
        "seed": np.int64(3),
        "norm": np.bool_(True),
        "eps": math.inf,
        "net": {"sizes": (64, 64), "dims": np.array([[1, 2]])},
        "beta": torch.tensor(0.25),
        3: b"x",
    }
    hp, _ = norm(hparams, kind="hparams")
    out = hp["hparams"].data
    assert out == {
        "lr": 1e-3, "gamma": 0.5, "clip": 0.2, "seed": 3, "norm": True, "eps": "inf",
        "net": {"sizes": [64, 64], "dims": [[1, 2]]}, "beta": 0.25, "3": "x",
    }  # fmt: skip
    assert type(out["clip"]) is float and type(out["seed"]) is int and type(out["norm"]) is bool
    assert ast.literal_eval(repr(out)) == out
    text, _ = norm({"a": {"b": "hello"}, "c": b"bytes"}, kind="text")
    assert text["text"].data == {"a/b": "hello", "c": "bytes"}


def test_other_kinds_pass_unchanged():
    data = {"path": "ckpt/iteration_1.pth.tar", "iteration": 1}
    by_kind, report = norm(data, kind="artifact")
    assert by_kind["artifact"].data is data
    assert report.as_dict() == {"counts": {}, "renamed": {}}


def test_literal_round_trips_through_repr_and_json():
    value = {"a": [1, 2.5, None, True], "b": {"c": math.nan, "d": -math.inf}, 1: (b"z", object)}
    out = literal(value)
    assert ast.literal_eval(repr(out)) == out
    assert json.loads(json.dumps(out)) == out
    assert out["b"] == {"c": "nan", "d": "-inf"} and out["1"] == ["z", str(object)]


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.text(alphabet="abc_", min_size=1, max_size=4),
        st.one_of(st.integers(-(2**60), 2**60), st.floats(allow_nan=False)),
        max_size=8,
    )
)
def test_plain_numbers_pass_unchanged_and_uncounted(data):
    by_kind, report = norm(data)
    assert (by_kind["scalars"].data if data else {}) == data
    assert report.as_dict() == {"counts": {}, "renamed": {}}


def test_end_to_end_routes_and_report(tmp_path):
    logger = rltrack.make_logger({"run": {"root": str(tmp_path), "name": "v"}, "backends": {"use": ["memory"]}})
    for i in range(3):
        logger.write(
            {"loss": torch.tensor(float(i)), "acts": np.arange(i + 2), "msg": f"it {i}", "bad": object(), 2: np.int32(i)},
            step=i,
            namespace="learner",
        )
    assert logger.close(timeout=10)
    memory = logger.backends["memory"]
    assert memory.metrics == {"learner/loss": [0.0, 1.0, 2.0], "learner/2": [0, 1, 2]}
    assert [e.kind for e in memory.events] == ["scalars", "histogram", "text"] * 3
    assert [e.data for e in memory.events if e.kind == "histogram"] == [{"acts": [float(x) for x in range(i + 2)]} for i in range(3)]
    assert [e.data for e in memory.events if e.kind == "text"] == [{"msg": f"it {i}"} for i in range(3)]
    journal = list(rltrack.read_journal(logger.run_dir))
    assert [e.to_dict() for e in journal] == [e.to_dict() for e in memory.events]
    saved = json.loads((logger.run_dir / "report.json").read_text())
    assert saved["counts"]["core.converted"] == {"Tensor -> float": 3, "int32 -> int": 3}
    assert saved["counts"]["core.routed"] == {"ndarray -> histogram": 3, "str -> text": 3}
    assert saved["counts"]["core.dropped"] == {"bad: no numeric conversion for object": 3}
    assert saved["renamed"] == {"core": {"2 (int)": "2"}}


def test_end_to_end_a_hostile_value_does_not_stop_the_run(tmp_path):
    logger = rltrack.make_logger({"run": {"root": str(tmp_path)}, "backends": {"use": ["memory"]}})
    logger.write({"bad": Hostile(), "x": 1.0})
    logger.write({"x": 2.0})
    assert logger.close(timeout=10)
    assert logger.backends["memory"].metrics == {"x": [1.0, 2.0]}
    assert json.loads((logger.run_dir / "report.json").read_text())["counts"]["core.dropped"] == {
        "bad: converting Hostile raised KeyError": 1
    }


def test_end_to_end_none_reaches_backends_only_without_the_none_filter(tmp_path):
    for filters, expected in (([], [1.0, None]), ([{"type": "none"}], [1.0])):
        logger = rltrack.make_logger(
            {"run": {"root": str(tmp_path)}, "filters": filters, "backends": {"use": ["memory"]}}
        )
        logger.write({"x": 1.0})
        logger.write({"x": None})
        assert logger.close(timeout=10)
        assert logger.backends["memory"].metrics == {"x": expected}


def test_report_counts_by_section_from_many_threads_and_saves(tmp_path):
    import threading

    report = Report()

    def work():
        for i in range(1000):
            report.count("dropped", f"reason {i % 5}")
            report.count("errors", "timeout", 2, section="mlflow")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report.rename("mlflow", "a//b", "a/b")
    assert report.total("dropped") == 4000 and report.total("errors", section="mlflow") == 8000
    assert report.total("dropped", section="mlflow") == 0
    report.save(tmp_path / "report.json")
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved == {
        "counts": {"core.dropped": {f"reason {i}": 800 for i in range(5)}, "mlflow.errors": {"timeout": 8000}},
        "renamed": {"mlflow": {"a//b": "a/b"}},
    }
    assert report.summary().splitlines() == [
        "  core.dropped: 4000 (reason 0, reason 1, reason 2, ...)",
        "  mlflow.errors: 8000 (timeout)",
        "  mlflow.renamed: 1 keys",
    ]
    assert Report().summary() == ""
