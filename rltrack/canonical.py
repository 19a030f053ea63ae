"""One vocabulary for the same quantity from different frameworks.

Names follow DI-engine/LightZero (`collector/reward_mean`,
`evaluator/reward_mean`, `learner/total_loss_avg`, ...), so an SB3 run and an
RLlib run land on one chart. Each adapter module owns its own mapping
`CANONICAL: dict[native flat key, canonical flat key]`; `vocabulary()` gathers
them into the table the README shows.

`run.names` in the config chooses what is sent: "both" (default: the native key
and its canonical twin), "canonical" (the canonical name replaces the native
one) or "native" (no canonical names).
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

NAME_MODES = ("both", "canonical", "native")

ADAPTER_MODULES = {
    "sb3": "rltrack.adapters.sb3",
    "rllib": "rltrack.adapters.tune",
    "acme": "rltrack.adapters.acme",
    "spinup": "rltrack.adapters.spinup",
}


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


def vocabulary() -> dict[str, dict[str, list[str]]]:
    """canonical name -> {framework: [native keys]}, from every adapter's mapping."""
    table: dict[str, dict[str, list[str]]] = {}
    for framework, module in ADAPTER_MODULES.items():
        try:
            mapping = importlib.import_module(module).CANONICAL
        except (ImportError, AttributeError):  # adapter not written yet
            continue
        for native, canonical in mapping.items():
            table.setdefault(canonical, {}).setdefault(framework, []).append(native)
    return dict(sorted(table.items()))
