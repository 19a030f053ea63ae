"""What the loggers of JAX, Brax, PufferLib and Stoix share: a run named after
the library's own experiment name (unless the config names it), and their
values as plain Python numbers.

These libraries hand over jax arrays, numpy scalars and 0-d arrays. Converting
them here (`np.asarray(x).item()`, about 2 µs for a value already on the host,
~1 µs each for a list of them through `plain_each`) keeps the journal and
every tracker exact and leaves no "converted" notice for conversions that
lose nothing; an array of more than one value is kept as an array (a
histogram).
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from rltrack.core.events import Event
from rltrack.core.optional import installed_version
from rltrack.core.values import flatten
from rltrack.frameworks.canonical import by_namespace, names_mode, with_canonical_names

#: Types taken as they are: the common case costs one set lookup.
_PLAIN = frozenset((int, float, type(None)))
#: Modules of array types that never change once made (jax's), safe to convert later on another thread.
_IMMUTABLE = frozenset(("jaxlib._jax", "jaxlib.xla_extension"))


def open_run(
    config: str | Path | Mapping[str, Any] | None,
    sections: dict[str, Any],
    *,
    framework: str,
    distribution: str | None = None,
    name: str | None = None,
    task: str | None = None,
) -> Any:
    """A new rltrack `Logger`: `config` and the sections (`run=`, `backends=`,
    `filters=`) as `rltrack.make_logger` takes them; the run named `name` and
    put in experiment `task` where the config names neither; the framework and
    its version in meta.json's info."""
    from rltrack.training.config import load_config, make_logger

    run = dict(sections.pop("run", None) or {})
    named = load_config(config, run=run, **sections)["run"]
    if name and not named.get("name"):
        run["name"] = name
    if task and not named.get("task"):
        run["task"] = task
    logger = make_logger(config, run=run, **sections)
    logger.set_run_info({"framework": framework, f"{framework}_version": installed_version(distribution or framework)})
    return logger


def plain(value: Any) -> Any:
    """A Python int, float or None for a number of any library (a jax array, a
    numpy or torch scalar, a 0-d or one-element array; a bool as 0/1); an array
    of several values as a numpy array; anything else unchanged."""
    if type(value) in _PLAIN:
        return value
    if type(value) is bool:
        return int(value)
    try:
        import numpy as np

        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - not array-like: the pipeline counts what it does with it
        return value
    array = numeric(array)
    if array.dtype.kind not in "biuf":
        return value
    if array.size != 1:  # a copy: the pipeline reads it later, and a library may reuse its buffer meanwhile (numpy, torch share memory)
        return array.copy()
    item = array.item()
    return int(item) if type(item) is bool else item


def numeric(array: Any) -> Any:
    """A numpy array of one of jax's own number types (ml_dtypes: bfloat16,
    the float8s, int4), which numpy sees as raw bytes, as float64 or int64:
    each of their values exactly; any other array as it is."""
    if array.dtype.kind == "V" and array.dtype.type.__module__.partition(".")[0] == "ml_dtypes":
        import numpy as np

        return array.astype(np.int64 if "int" in array.dtype.name else np.float64)
    return array


def plain_each(values: list[Any]) -> list[Any]:
    """`plain` of each value. The common case, numbers of one element each (a
    `jax.debug.callback`'s jax arrays), in C: numpy's `asarray` and `item`
    mapped over the list cost ~1 µs a jax array, `plain` of each ~2 µs."""
    import numpy as np

    try:
        items = list(map(np.ndarray.item, map(np.asarray, values)))
    except Exception:  # noqa: BLE001 - an array of several values, or one numpy cannot take: each on its own
        return list(map(plain, values))
    return items if _PLAIN.issuperset(map(type, items)) else list(map(plain, values))  # a bool, text, ...: `plain` says


def emit_values(
    logger: Any,
    metrics: Mapping[str, Any],
    steps: dict[str, int],
    source: str,
    canonical: Mapping[str, str] | None = None,
    *,
    ready: bool = False,
) -> None:
    """A (nested) metrics dict as events of `source`: keys flattened with "/"
    and kept as written (the part before the first "/" is the namespace), each
    value a plain number (`plain`) or, with several values, a histogram; the
    canonical twins of `canonical`'s keys beside them per `run.names`. The
    calling thread copies the dict (flattened) and converts what could change
    afterwards (a numpy array, a tensor); jax arrays, which never change, are
    converted with the rest on the pipeline thread (`Logger.emit_deferred`):
    one still being computed would make the calling thread wait for it.

    `ready`: the jax arrays are host values already computed (the arguments of
    a `jax.debug.callback`), converted now as well, ~1 µs each (`plain_each`). Left to the
    pipeline thread, a callback's 12 values cost the process three times as
    much CPU (bench_jax.py, issue 41): each conversion there took 4-5 µs, and
    the arrays held until then kept their buffers alive and set off Python's
    garbage collector (and jax's `gc` callback) several times as often."""
    flat = flatten(metrics if type(metrics) is dict else dict(metrics))  # a new dict: the caller's is left as it is
    if ready:
        keys = [key for key, value in flat.items() if type(value) not in _PLAIN]
        flat.update(zip(keys, plain_each([flat[key] for key in keys])))
    else:
        for key, value in flat.items():
            if type(value) not in _PLAIN and type(value).__module__ not in _IMMUTABLE:
                flat[key] = plain(value)
    logger.emit_deferred(partial(_events, logger, flat, steps, source, canonical, time.time()))


def _events(logger: Any, flat: dict[str, Any], steps: dict[str, int], source: str, canonical: Mapping[str, str] | None, now: float) -> list[Event]:
    if _PLAIN.issuperset(map(type, flat.values())):  # every value a number already (a callback's, `ready`): the common case, in C
        scalars, arrays = flat, {}
    else:
        scalars, arrays = {}, {}
        for key, value in flat.items():
            value = plain(value)
            (arrays if hasattr(value, "shape") else scalars)[key] = value
    if canonical:
        scalars = with_canonical_names(scalars, canonical, names_mode(logger))
    return [
        Event(now, data, kind, namespace, dict(steps), source, run=logger.name)
        for kind, values in (("scalars", scalars), ("histogram", arrays))
        if values
        for namespace, data in by_namespace(values).items()
    ]


def typed_hparams(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments as hyperparameters that keep their types: numbers,
    bools, strings and None as they are, sequences of them as lists, mappings
    nested; a function (or `functools.partial`) by its qualified name, another
    object (an environment, a network) by its class name."""
    return {str(key): _typed(value) for key, value in values.items()}


def _typed(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, Mapping):
        return typed_hparams(value)
    if isinstance(value, (list, tuple)):
        return [_typed(item) for item in value]
    converted = plain(value)
    if type(converted) in _PLAIN:
        return converted
    func = getattr(value, "func", value)  # functools.partial
    if callable(func) and hasattr(func, "__qualname__"):
        return f"{getattr(func, '__module__', '')}.{func.__qualname__}".lstrip(".")
    return type(value).__name__
