"""The common event schema every adapter produces and every backend consumes.

One `Event` is one record of one kind (scalars, text, hparams, ...) from one
namespace at one point on one or more named step axes. It is what the journal
stores, one JSON object per line, so the field names below are a file format:
change them only together with `SCHEMA_VERSION`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Mapping

SCHEMA_VERSION = 1

KINDS = ("scalars", "text", "hparams", "histogram", "image", "video", "artifact", "timing")

#: Kinds whose data are plain numbers (a timing is a scalar that is a duration in seconds).
NUMERIC_KINDS = ("scalars", "timing")

DEFAULT_STEP_AXIS = "step"


@dataclass(slots=True)
class Event:
    """One record on its way from a framework to the trackers.

    `steps` maps axis names to integers (`{"env_steps": 2048, "train_iter": 3}`);
    the first axis is the primary one, used where a tracker takes a single step.
    `preaggregated` says the values were already smoothed or aggregated before
    they reached rltrack (RLlib, for instance, reports moving averages).
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
        )

    def tag(self, key: str) -> str:
        """`<namespace>/<key>`, the name a key carries in flat trackers."""
        return tag(self.namespace, key)

    def to_dict(self) -> dict[str, Any]:
        return {
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

    def to_json(self) -> str:
        """One line of JSON. Non-finite floats are written as NaN/Infinity/-Infinity,
        as Python's json module, pandas and JavaScript's JSON5 readers accept."""
        if self.kind not in NUMERIC_KINDS or _encode_flat is None:
            return _ENCODER.encode(self.to_dict())
        # Every record is a scalars event: the same text, with the fields that
        # repeat from record to record encoded once, the rest by json's C encoder.
        head, after_time, after_steps, end = _fixed_parts(
            self.schema, self.run, self.source, self.namespace, self.worker, self.kind, self.preaggregated
        )
        return "".join(
            (head, *_encode_flat(self.time, 0), after_time, *_encode_flat(self.steps, 0), after_steps, *_encode_flat(self.data, 0), end)
        )

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Event:
        schema = int(obj.get("schema", SCHEMA_VERSION))
        if schema > SCHEMA_VERSION:
            raise ValueError(
                f"event schema {schema} is newer than this rltrack understands ({SCHEMA_VERSION}); "
                "upgrade rltrack to read it"
            )
        return cls(
            time=float(obj["time"]),
            data=dict(obj.get("data", {})),
            kind=str(obj.get("kind", "scalars")),
            namespace=str(obj.get("namespace", "")),
            steps={str(k): int(v) for k, v in obj.get("steps", {}).items()},
            source=str(obj.get("source", "api")),
            worker=str(obj.get("worker", "0")),
            run=str(obj.get("run", "")),
            preaggregated=bool(obj.get("preaggregated", False)),
            schema=schema,
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


#: Built once: `json.dumps` with any option builds a new encoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_fallback)

#: json's C encoder with `_ENCODER`'s options, built once (`JSONEncoder.encode`
#: builds one per call), without the circular-reference check: it is used for
#: the flat dicts of numbers of scalars events only. None without the C module.
_encode_flat = None if c_make_encoder is None else c_make_encoder(
    None, _json_fallback, encode_basestring_ascii, None, ":", ",", False, False, True
)

#: The fields `to_json` encodes per event; the others repeat and are kept encoded.
_VARYING = ("time", "steps", "data")


@functools.lru_cache(maxsize=1024)
def _fixed_parts(schema: int, run: str, source: str, namespace: str, worker: str, kind: str, preaggregated: bool) -> tuple[str, ...]:
    """The JSON text of an event with these fields around its time, steps and
    data (four pieces), cut from `to_dict`'s order and `_ENCODER`'s output."""
    template = Event(0.0, {}, kind, namespace, {}, source, worker, run, preaggregated, schema).to_dict()
    assert tuple(name for name in template if name in _VARYING) == _VARYING, "to_json fills time, steps, data in this order"
    pieces, text = [], "{"
    for index, (name, value) in enumerate(template.items()):
        text += ("," if index else "") + _ENCODER.encode(name) + ":"
        if name in _VARYING:
            pieces.append(text)
            text = ""
        else:
            text += _ENCODER.encode(value)
    return (*pieces, text + "}")
