"""Filters and backends built from their config tables, with errors a user can act on.

Every mistake is a `ConfigError` naming where it is (file and key), the value
found, what is allowed, and how to fix it. The training process builds them
from its config (rltrack.config); the agent builds the backends of the runs
it serves from their registrations (rltrack.agent) with the same code.
"""

from __future__ import annotations

import difflib
import inspect
from importlib import metadata
from typing import Any, Callable, Mapping

from rltrack.backends import Backend, RemoteBackend, backend_class
from rltrack.filters import FILTER_TYPES, Filter, FilterChain
from rltrack.optional import MissingExtraError
from rltrack.report import Report


class ConfigError(ValueError):
    """A config mistake; the message says where, what was found and how to fix it."""


def build_chain(specs: list[Any], where: str, report: Report) -> FilterChain:
    """The filter chain of a config's `filters` list (the training process's,
    the only place filters run: the journal holds filtered events)."""
    return FilterChain([build_filter(spec, f"{where}: filters[{i}]") for i, spec in enumerate(specs)], report)


def build_filter(spec: Any, where: str) -> Filter:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be a table with a 'type' key, got {spec!r}")
    params = dict(spec)
    kind = params.pop("type", None)
    if kind not in FILTER_TYPES:
        raise ConfigError(f"{where}: type = {kind!r} is not a filter;{choices(str(kind), FILTER_TYPES)}")
    return _construct(FILTER_TYPES[kind], params, f"{where} (type = {kind!r})")


def build_backend(name: str, settings: Mapping[str, Any], where: str) -> Backend | RemoteBackend:
    try:
        cls = backend_class(name)
    except MissingExtraError as exc:
        raise ConfigError(f"{where}: backend {name!r}: {exc}") from None
    except ImportError as exc:  # a backend module importing its package directly
        fix = f"pip install 'rltrack[{name}]'" if name in _extras() else "install the package it names"
        raise ConfigError(f"{where}: backend {name!r} could not be imported ({exc}); fix: {fix}") from None
    return _construct(cls, dict(settings), f"{where}: backends.{name}")


def _extras() -> list[str]:
    """The extras rltrack was installed with metadata for (`mlflow`, `wandb`, ...)."""
    try:
        return metadata.metadata("rltrack").get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return []


def _construct(cls: Callable[..., Any], params: dict[str, Any], where: str) -> Any:
    signature = inspect.signature(cls)
    check_keys(params, tuple(signature.parameters), where, "")
    for pname, param in signature.parameters.items():
        if param.default is inspect.Parameter.empty and pname not in params:
            takes = ", ".join(
                f"{n} (required)" if p.default is inspect.Parameter.empty else n for n, p in signature.parameters.items()
            )
            raise ConfigError(f"{where}: missing required key {pname!r}; add it (keys: {takes})")
    try:
        return cls(**params)
    except MissingExtraError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_keys(mapping: Mapping[str, Any], allowed: tuple[str, ...], where: str, prefix: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {prefix + str(key)!r};{choices(str(key), allowed)}")


def choices(found: str, allowed: Any) -> str:
    """What a message lists after a wrong name: the allowed names and the closest one."""
    names = list(allowed)
    hint = difflib.get_close_matches(found, names, n=1)
    return f" allowed: {', '.join(names) or '(none)'}." + (f" Did you mean {hint[0]!r}?" if hint else "")
