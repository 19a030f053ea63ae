"""Turns whatever a training loop hands us into values every backend can take.

Frameworks log numpy scalars, 0-d tensors, bools, nested dicts, arrays, strings
and sometimes objects that mean nothing to a tracker. Rather than crash the
training loop or drop them silently, `normalize` converts what it can, routes
what belongs to another kind (strings to `text`, arrays to `histogram`), drops
the rest, and counts every case in the run's `Report`.

It runs on the pipeline thread, never on the caller's.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.core.report import Report


def normalize(event: Event, report: Report) -> list[Event]:
    """Split a scalar record into a clean scalar event plus text/histogram events.

    Hyperparameters and text become JSON- and literal-safe; histogram records
    become lists of floats; other kinds pass unchanged. The returned scalar
    event (if any) comes first and holds only ints, floats and None.
    """
    if event.kind in NUMERIC_KINDS and _is_plain(event.data):  # the common case: nothing to convert, count or rename
        return [event]
    if event.kind in ("hparams", "text"):
        return [event.derive(literal(flatten(event.data) if event.kind == "text" else event.data))]
    if event.kind == "histogram":
        return _histograms(event, report)
    if event.kind not in NUMERIC_KINDS:
        return [event]
    scalars: dict[str, Any] = {}
    texts: dict[str, str] = {}
    histograms: dict[str, list[float]] = {}
    for key, value in flatten(event.data, clean=lambda k: _clean_key(k, report)).items():
        name = type(value).__name__
        try:
            where, kept = _classify(value)
        except Exception as exc:  # noqa: BLE001 - a user's object must not stop the pipeline thread
            report.count("dropped", f"{key}: converting {name} raised {type(exc).__name__}")
            continue
        if where == "scalars":
            if type(value) not in (int, float) and value is not None:
                report.count("converted", f"{name} -> {type(kept).__name__}")
            scalars[key] = kept
        elif where == "histogram":
            histograms[key] = kept
            report.count("routed", f"{name} -> histogram")
        elif where == "text":
            texts[key] = kept
            report.count("routed", f"{name} -> text")
        elif where == "empty":  # an empty array says nothing, and trackers reject empty histograms
            report.count("dropped", f"{key}: empty {name}")
        else:
            report.count("dropped", f"{key}: no numeric conversion for {name}")
    out = []
    if scalars:
        out.append(event.derive(scalars))
    if histograms:
        out.append(event.derive(histograms, kind="histogram"))
    if texts:
        out.append(event.derive(texts, kind="text"))
    return out


def _histograms(event: Event, report: Report) -> list[Event]:
    """A record logged as `kind="histogram"`: every value becomes a list of
    floats (a single number a list of one), so the journal holds numbers, not
    the repr of an array."""
    data: dict[str, list[float]] = {}
    for key, value in flatten(event.data, clean=lambda k: _clean_key(k, report)).items():
        try:
            where, kept = _classify(value)
        except Exception:  # noqa: BLE001 - a user's object must not stop the pipeline thread
            where, kept = "drop", None
        if where == "scalars" and kept is not None:
            data[key] = [float(kept)]
        elif where == "histogram":
            data[key] = kept
        else:
            report.count("dropped", f"{key}: no histogram values in {type(value).__name__}")
    return [event.derive(data)] if data else []


def _classify(value: Any) -> tuple[str, Any]:
    """Where one value goes and what of it is kept: ("scalars", number or None),
    ("histogram", floats), ("text", str), ("empty", None) or ("drop", None)."""
    value = _from_array_protocol(value)
    number = _as_number(value)
    if number is not _NOT_A_NUMBER:
        return "scalars", number
    values = _as_float_list(value)
    if values is not None:
        return ("histogram", values) if values else ("empty", None)
    if isinstance(value, bytes):
        return "text", value.decode("utf-8", "replace")
    if isinstance(value, str):
        return "text", str(value)
    return "drop", None


def flatten(mapping: dict[Any, Any], prefix: str = "", clean: Callable[[Any], str] = str) -> dict[str, Any]:
    """Nested dicts to one level with `a/b` keys; `clean` turns each key part into text."""
    flat: dict[str, Any] = {}
    for raw_key, value in mapping.items():
        key = clean(raw_key)
        full = f"{prefix}/{key}" if prefix else key
        if isinstance(value, dict):
            flat.update(flatten(value, full, clean))
        else:
            flat[full] = value
    return flat


_STR_TYPE = frozenset((str,))
_PLAIN_TYPES = frozenset((int, float, type(None)))


def _is_plain(data: dict[Any, Any]) -> bool:
    """Non-empty str keys and values that are exactly int, float or None.
    Set checks over `map(type, ...)` run in C: this runs for every record.
    The key types are checked before `"" in data`, which could call a
    user's key's `__eq__`."""
    return _STR_TYPE.issuperset(map(type, data)) and "" not in data and _PLAIN_TYPES.issuperset(map(type, data.values()))


def _clean_key(raw_key: Any, report: Report) -> str:
    key = raw_key if isinstance(raw_key, str) else str(raw_key)
    if not key:
        key = "_empty_key"
    if key != raw_key:  # the type is kept in the record: 1 and "1" look alike
        report.rename("core", f"{raw_key!r} ({type(raw_key).__name__})", key)
    return key


def literal(value: Any) -> Any:
    """A copy that `ast.literal_eval(repr(...))` and JSON both read back:
    numpy/torch scalars and arrays become Python numbers and lists (hyper-
    parameters are often sampled with numpy), non-finite floats and other
    objects become their text."""
    if isinstance(value, dict):
        return {str(k): literal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [literal(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None:
        return value
    for plain in (bool, int, float, str):  # subclasses too: repr(numpy.float64(1)) is "np.float64(1.0)"
        if isinstance(value, plain):
            return plain(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and _size(value) is not None:
        plain = tolist()
        if plain is not value:
            return literal(plain)
    return str(value)


_NOT_A_NUMBER = object()


def _from_array_protocol(value: Any) -> Any:
    """A numpy array for objects that only speak numpy's `__array__` protocol
    (TensorFlow tensors, as Acme learners hand them over); others unchanged."""
    if not hasattr(value, "__array__") or hasattr(value, "item"):
        return value
    import numpy  # present wherever such objects exist

    return numpy.asarray(value)


def _as_number(value: Any) -> Any:
    """int/float/None for anything that is one number, else `_NOT_A_NUMBER`.

    An array or tensor of one element counts as that number, whatever its
    shape (`np.array([2.0])`, `torch.tensor([[7]])`), as TensorBoard's
    `add_scalar` takes it (CleanRL logs each episode's return so); Python
    lists and tuples of one number stay histograms."""
    if value is None or type(value) in (int, float):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):  # subclasses, e.g. numpy.float64
        return float(value) if isinstance(value, float) else int(value)
    item = getattr(value, "item", None)
    if item is None or _size(value) != 1:
        return _NOT_A_NUMBER
    try:
        number = item()
    except (TypeError, ValueError, RuntimeError):
        return _NOT_A_NUMBER
    return _as_number(number) if not hasattr(number, "item") else _NOT_A_NUMBER


def _size(value: Any) -> int | None:
    numel = getattr(value, "numel", None)  # torch
    if callable(numel):
        try:
            return int(numel())
        except (TypeError, RuntimeError):
            return None
    size = getattr(value, "size", None)  # numpy
    return size if isinstance(size, int) else None


def _as_float_list(value: Any) -> list[float] | None:
    """A flat list of floats for arrays, tensors and sequences of numbers, else None."""
    if isinstance(value, (str, bytes, dict)):
        return None
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and _size(value) is not None:  # numpy, torch (any device, with or without grad)
        value = tolist()
    if not isinstance(value, (list, tuple)):
        return None
    flat: list[float] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
            continue
        number = _as_number(item)
        if number is _NOT_A_NUMBER or number is None:
            return None
        flat.append(float(number))
    return flat
