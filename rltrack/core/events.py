"""The common event schema every adapter produces and every backend consumes.

One `Event` is one record of one kind (scalars, text, hparams, ...) from one
namespace at one point on one or more named step axes. It is what the journal
stores, one JSON object per line, so the field names below are a file format:
change them only together with `SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import orjson

SCHEMA_VERSION = 1

KINDS = ("scalars", "text", "hparams", "histogram", "image", "video", "artifact", "timing")

#: Kinds whose data are plain numbers (a timing is a scalar that is a duration in seconds).
NUMERIC_KINDS = ("scalars", "timing")

DEFAULT_STEP_AXIS = "step"


class NewerSchemaError(ValueError):
    """A line written by a newer rltrack: not damage, so readers do not skip it, they say to upgrade."""


@dataclass(slots=True)
class Event:
    """One record on its way from a framework to the trackers.

    `steps` maps axis names to integers (`{"env_steps": 2048, "train_iter": 3}`);
    the first axis is the primary one, used where a tracker takes a single step.
    `preaggregated` says the values were already smoothed or aggregated before
    they reached rltrack (RLlib, for instance, reports moving averages).
    `namespace` and the keys are the names as the framework or script wrote
    them (`charts` and `episodic_return` for CleanRL's `charts/episodic_return`):
    trackers store `tag(key)`. `stage` is the DI-engine stage the values
    belong to in the local run directory's layout (`collector`, `learner`,
    ...) when it is not the namespace itself ("" then): where a value is
    filed, never what it is called. Written to the journal only when set.
    """

    time: float
    data: dict[str, Any]
    kind: str = "scalars"
    namespace: str = ""
    steps: dict[str, int] = field(default_factory=dict)
    source: str = "api"
    worker: str = "0"
    run: str = ""
    preaggregated: bool = False
    schema: int = SCHEMA_VERSION
    stage: str = ""

    @property
    def primary_step(self) -> int | None:
        """The value of the first step axis, or None when the event has none."""
        for value in self.steps.values():
            return value
        return None

    def derive(
        self,
        data: dict[str, Any],
        *,
        kind: str | None = None,
        time: float | None = None,
        steps: dict[str, int] | None = None,
    ) -> Event:
        """A copy with other data (and optionally kind, time, steps). Filters call
        this per record, so it is a plain constructor call, not `dataclasses.replace`."""
        return Event(
            self.time if time is None else time,
            data,
            self.kind if kind is None else kind,
            self.namespace,
            self.steps if steps is None else steps,
            self.source,
            self.worker,
            self.run,
            self.preaggregated,
            self.schema,
            self.stage,
        )

    @property
    def filed_under(self) -> str:
        """The namespace of the local layout's stage logs: `stage`, else `namespace`."""
        return self.stage or self.namespace

    def filed_data(self) -> dict[str, Any]:
        """The values as the stage's table in the local layout files them: by
        their whole name when filed under a stage other than their namespace
        (`charts/episodic_return` in the collector's table)."""
        if not self.stage:
            return self.data
        return {tag(self.namespace, key): value for key, value in self.data.items()}

    def tag(self, key: str) -> str:
        """`<namespace>/<key>`, the name a key carries in flat trackers."""
        return tag(self.namespace, key)

    def to_dict(self) -> dict[str, Any]:
        record = {
            "schema": self.schema,
            "time": self.time,
            "run": self.run,
            "source": self.source,
            "namespace": self.namespace,
            "worker": self.worker,
            "kind": self.kind,
            "steps": self.steps,
            "preaggregated": self.preaggregated,
            "data": self.data,
        }
        if self.stage:
            record["stage"] = self.stage
        return record

    def to_json(self) -> str:
        """One line of JSON (`to_line` without its newline)."""
        return self.to_line()[:-1].decode()

    def to_line(self) -> bytes:
        """One journal line: JSON ending in a newline, ASCII. Non-finite floats
        are written as NaN/Infinity/-Infinity, as Python's json module, pandas
        and JavaScript's JSON5 readers accept.

        orjson encodes the line (a float's repr costs ~1 µs on a Python built
        without PGO, so json's encoder spent ~12 µs on a record of 10 floats);
        json's encoder takes the lines orjson cannot write the same way: a NaN
        or infinity (orjson writes them as null, as it writes None), non-ASCII
        text, an integer beyond 64 bits, a key that is not exactly a str.
        A line holding null is looked through for NaN and infinities only
        then, so a record with None is encoded once."""
        record = self.to_dict()
        try:
            line = orjson.dumps(record, default=_orjson_fallback)
        except orjson.JSONEncodeError:
            pass
        else:
            if line.isascii() and (b"null" not in line or _finite(record.values())):
                return line + b"\n"  # a copy of its size: orjson's own bytes keep a larger buffer while the batch's lines wait
        return (_ENCODER.encode(record) + "\n").encode()

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Event:
        """The event of one journal object (every reader calls this per line,
        so the fields are passed in their order, not by keyword)."""
        get = obj.get
        schema = int(get("schema", SCHEMA_VERSION))
        if schema > SCHEMA_VERSION:
            raise NewerSchemaError(
                f"event schema {schema} is newer than this rltrack understands ({SCHEMA_VERSION}); "
                "upgrade rltrack to read it"
            )
        return cls(
            float(obj["time"]),
            dict(get("data", {})),
            str(get("kind", "scalars")),
            str(get("namespace", "")),
            {str(k): int(v) for k, v in get("steps", {}).items()},
            str(get("source", "api")),
            str(get("worker", "0")),
            str(get("run", "")),
            bool(get("preaggregated", False)),
            schema,
            str(get("stage", "")),
        )

    @classmethod
    def from_json(cls, line: str) -> Event:
        return cls.from_dict(json.loads(line))


def tag(namespace: str, key: str) -> str:
    """`<namespace>/<key>` (just `key` without a namespace): `Event.tag`."""
    return f"{namespace}/{key}" if namespace else key


def _json_fallback(value: Any) -> Any:
    """Last resort for values the normaliser let through (it should not): their text."""
    return repr(value)


def _finite(values: Iterable[Any]) -> bool:
    """No NaN or infinity among `values`, nested dicts and lists included
    (orjson writes them as null; numpy's floats are floats)."""
    for value in values:
        if isinstance(value, float):
            if value - value != 0.0:
                return False
        elif isinstance(value, dict):
            if not _finite(value.values()):
                return False
        elif isinstance(value, (list, tuple)) and not _finite(value):
            return False
    return True


def _orjson_fallback(value: Any) -> Any:
    """orjson's `default`: what json's encoder writes for the types orjson does
    not take (float and int subclasses, such as numpy's, as numbers; the rest as text)."""
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return int(value)
    return repr(value)


#: Built once: `json.dumps` with any option builds a new encoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_fallback)
