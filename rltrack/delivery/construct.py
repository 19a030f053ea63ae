"""Filters and backends built from their config tables, with errors a user can act on.

Every mistake is a `ConfigError` naming where it is (file and key), the value
found, what is allowed, and how to fix it. The training process builds its
filters and in-process backends from its config (rltrack.training.config), and checks
the settings of the others (`backend_type`); the agent builds those from the
registrations of the runs it serves (rltrack.agent.process), each once.
"""

from __future__ import annotations

import difflib
import inspect
import reprlib
from importlib import metadata
from typing import Any, Callable, Mapping, TypeVar

from rltrack.delivery.registry import Backend, RemoteBackend, backend_class
from rltrack.delivery.thinning import split_settings
from rltrack.filters import FILTER_TYPES, Filter
from rltrack.core.optional import MissingExtraError


T = TypeVar("T")


class ConfigError(ValueError):
    """A config mistake; the message says where, what was found and how to fix it."""


def build_filter(spec: Any, where: str) -> Filter:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be a table with a 'type' key, got {spec!r}")
    params = dict(spec)
    kind = params.pop("type", None)
    if kind not in FILTER_TYPES:
        raise ConfigError(f"{where}: type = {kind!r} is not a filter;{choices(str(kind), FILTER_TYPES)}")
    cls = FILTER_TYPES[kind]
    where = f"{where} (type = {kind!r})"
    check_params(cls, params, where)
    return _checked(lambda: cls(**params), where)


def backend_type(name: str, settings: Mapping[str, Any], where: str, in_use: bool = True) -> type[Backend | RemoteBackend]:
    """The class of backend `name`, with `settings` checked by its class method
    `validate`: the training process checks the backends the agent builds
    without building them (no tracker client, nothing of its package imported
    beyond what the check needs). `in_use`: also what only this machine can
    tell (`RemoteBackend.validate(..., in_use=True)`: the package installed,
    credentials), which a table of a backend not in `backends.use` is spared."""
    try:
        cls = backend_class(name)
    except MissingExtraError as exc:
        raise ConfigError(f"{where}: backend {name!r}: {exc}") from None
    except ImportError as exc:  # a backend module importing its package directly
        fix = f"pip install 'rltrack[{name}]'" if name in _extras() else "install the package it names"
        raise ConfigError(f"{where}: backend {name!r} could not be imported ({exc}); fix: {fix}") from None
    where = f"{where}: backends.{name}"
    own = _checked(lambda: split_settings(settings)[0], where) if issubclass(cls, RemoteBackend) else dict(settings)
    params = check_params(cls, own, where)
    if issubclass(cls, RemoteBackend):
        _checked(lambda: cls.validate(params, in_use), where)
    else:
        _checked(lambda: cls.validate(params), where)
    return cls


def build_backend(name: str, settings: Mapping[str, Any], where: str) -> Backend | RemoteBackend:
    """Backend `name` built from `settings`, once they are valid (see
    `backend_type`); a tracker from its own settings, without delivery's (`tracker_view`)."""
    cls = backend_type(name, settings, where)
    if not issubclass(cls, RemoteBackend):
        return _checked(lambda: cls(**settings), f"{where}: backends.{name}")
    return _checked(lambda: cls(**split_settings(settings)[0]), f"{where}: backends.{name}")


def tracker_view(settings: Mapping[str, Any]) -> tuple[float, str] | None:
    """A tracker's coarser view of the journal, from its (valid) settings
    `every` / `max_values_per_second` and `thin`, as `DeliveryWorker` takes it
    (rltrack.delivery.thinning); None: every value."""
    thinning = split_settings(settings)[1]
    return None if thinning is None else (thinning.every, thinning.how)


def _extras() -> list[str]:
    """The extras rltrack was installed with metadata for (`mlflow`, `wandb`, ...)."""
    try:
        return metadata.metadata("rltrack").get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return []


def check_params(cls: Callable[..., Any], params: dict[str, Any], where: str) -> dict[str, Any]:
    """`params` checked against the names `cls` takes (none unknown, every
    required one given); returns every parameter, the defaults filled in."""
    signature = inspect.signature(cls)
    check_keys(params, tuple(signature.parameters), where, "")
    for pname, param in signature.parameters.items():
        if param.default is inspect.Parameter.empty and pname not in params:
            takes = ", ".join(
                f"{n} (required)" if p.default is inspect.Parameter.empty else n for n, p in signature.parameters.items()
            )
            raise ConfigError(f"{where}: missing required key {pname!r}; add it (keys: {takes})")
    bound = signature.bind(**params)
    bound.apply_defaults()
    return dict(bound.arguments)


def _checked(call: Callable[[], T], where: str) -> T:
    """`call()`, its complaint about a setting (ValueError, TypeError, a missing extra) as a `ConfigError` naming `where`."""
    try:
        return call()
    except MissingExtraError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_keys(mapping: Mapping[str, Any], allowed: tuple[str, ...], where: str, prefix: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {prefix + str(key)!r} (= {reprlib.repr(mapping[key])});{choices(str(key), allowed)}")


def choices(found: str, allowed: Any) -> str:
    """What a message lists after a wrong name: the allowed names and the closest one."""
    names = list(allowed)
    hint = difflib.get_close_matches(found, names, n=1)
    return f" allowed: {', '.join(names) or '(none)'}." + (f" Did you mean {hint[0]!r}?" if hint else "")
