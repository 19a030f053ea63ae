"""One vocabulary for the same quantity from different frameworks.

Names follow DI-engine/LightZero (`collector/reward_mean`,
`evaluator/reward_mean`, `learner/total_loss_avg`, ...), so an SB3 run and an
RLlib run land on one chart. Each library's declaration
(rltrack.frameworks.library: its `LIBRARY`, registered by entry point) holds
its own mapping `canonical: {native flat key: canonical flat key}` (and
`stored`, the names rltrack's runs hold some keys under); `vocabulary()`
gathers those of every registered library into the table the README shows.

`run.names` in the config chooses what is sent: "both" (default: the native key
and its canonical twin), "canonical" (the canonical name replaces the native
one) or "native" (no canonical names).
"""

from __future__ import annotations

from functools import cache
from typing import Any, Mapping

from rltrack.frameworks.library import libraries

NAME_MODES = ("both", "canonical", "native")


def vocabularies() -> dict[str, Mapping[str, str]]:
    """library -> its native flat key -> canonical flat key, for every registered library that has names."""
    return {name: library.canonical for name, library in libraries().items() if library.canonical}


def names_mode(logger: Any) -> str:
    """The `run.names` mode of a logger's config; "both" when it has none (a
    stand-in logger) or names no known mode."""
    config = getattr(logger, "config", None)
    run = config.get("run", {}) if isinstance(config, Mapping) else {}
    mode = run.get("names", "both") if isinstance(run, Mapping) else "both"
    return mode if mode in NAME_MODES else "both"


def with_canonical_names(flat: Mapping[str, Any], mapping: Mapping[str, str], mode: str) -> dict[str, Any]:
    """`flat` (native `prefix/key` names) with canonical names added or swapped in per `mode`."""
    if mode == "native":
        return dict(flat)
    out: dict[str, Any] = {}
    for key, value in flat.items():
        canonical = mapping.get(key)
        if canonical is None or mode == "both":
            out[key] = value
        if canonical is not None:
            out[canonical] = value
    return out


def by_namespace(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Flat `<namespace>/<key>` names grouped as {namespace: {key: value}}, the
    namespace being the part before the first `/` ("" for a name without one):
    `Event.tag` gives each value its flat name back."""
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        namespace, _, key = name.partition("/") if "/" in name else ("", "", name)
        group = grouped.get(namespace)
        if group is None:  # not `setdefault(namespace, {})`: that builds a dict per value
            group = grouped[namespace] = {}
        group[key] = value
    return grouped


def vocabulary() -> dict[str, dict[str, list[str]]]:
    """canonical name -> {framework: [native keys]}, from every framework's mapping."""
    table: dict[str, dict[str, list[str]]] = {}
    for framework, mapping in vocabularies().items():
        for native, canonical in mapping.items():
            table.setdefault(canonical, {}).setdefault(framework, []).append(native)
    return dict(sorted(table.items()))


@cache
def native_to_canonical() -> dict[str, str]:
    """native flat key -> canonical flat key, over every framework's vocabulary."""
    table: dict[str, str] = {}
    for mapping in vocabularies().values():
        for native, canonical in mapping.items():
            table.setdefault(native, canonical)
    return table


@cache
def stored_names() -> dict[str, str]:
    """Every name a native value is found under -> its canonical name: the key
    as the framework logs it (as its own files hold it) and as rltrack's runs
    store it (SB3's prefixes become namespaces: `collector/ep_rew_mean`)."""
    table = dict(native_to_canonical())
    for library in libraries().values():
        for name, canonical in library.stored.items():
            table.setdefault(name, canonical)
    return table
