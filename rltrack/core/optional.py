"""Imports of optional third-party packages, with an error that names the extra."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


class MissingExtraError(ImportError):
    """An optional package is not installed; the message says what to install."""


def ensure_installed(module: str, extra: str, purpose: str) -> None:
    """Fails now, naming the extra, if `module` is missing, without importing it:
    backends check at config time and import on their delivery thread, because
    importing a tracker client takes seconds."""
    if importlib.util.find_spec(module) is None:
        require(module, extra, purpose)


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import `module` or raise an error telling the user which extra provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{purpose} needs the package '{module.split('.')[0]}', which is not installed "
            f"({exc}). Install it with: pip install 'rltrack[{extra}]'"
        ) from None


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution (`"torchrl"`, `"rsl-rl-lib"`), None if it has none."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None
