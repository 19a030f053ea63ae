"""The values inside TensorBoard `Summary.Value` protos, read by their fields only.

TensorBoard's, tensorboardX's and TensorFlow's proto classes alike (nothing
here imports them): scalars written as tensors, histograms (bucket counts),
images, the HParams plugin's session start (decoded by hand), and the text
tables and JSON that hold hyperparameters, typed. The translation
(rltrack.frameworks.tensorboard) uses them.
"""

from __future__ import annotations

import ast
import json
import math
import struct
from typing import Any, Iterator

#: The most values a histogram's buckets are expanded into.
MAX_HISTOGRAM_VALUES = 1000

def typed(text: str) -> Any:
    """A hyperparameter written as text, as the value it was: `2048` an int,
    `True` a bool, `0.00025` a float, `None`, lists and dicts; other text as it is."""
    stripped = text.strip()
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return value if isinstance(value, (int, float, bool, list, tuple, dict, type(None))) and not isinstance(value, complex) else text


def json_object(text: str) -> dict[str, Any]:
    """The JSON object a text holds (HF's TrainingArguments), {} for any other text."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def markdown_table(text: str) -> dict[str, Any]:
    """The `|key|value|` rows of CleanRL's hyperparameter table, typed (`typed`);
    the header and separator rows left out."""
    rows: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = line[1:-1].split("|", 1)
        if len(cells) != 2:
            continue
        key, value = cells[0].strip(), cells[1].strip()
        if not key or set(key) <= set("-: ") or (key, value) == ("param", "value"):
            continue
        rows[key] = typed(value)
    return rows


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of an encoded protobuf message: ints for varints,
    bytes for the rest (8 bytes for fixed64, 4 for fixed32)."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wire} is not read here")
        yield key >> 3, value


def _protobuf_value(buf: bytes) -> Any:
    """A `google.protobuf.Value`: null, number (double), string, bool; others None."""
    for number, value in _fields(buf):
        if number == 2:
            (double,) = struct.unpack("<d", value)
            return int(double) if math.isfinite(double) and double.is_integer() else double
        if number == 3:
            return value.decode("utf-8", "replace")
        if number == 4:
            return bool(value)
    return None


def session_hparams(content: bytes) -> dict[str, Any]:
    """The hyperparameters of the HParams plugin's session start
    (`HParamsPluginData.session_start_info.hparams`, decoded by hand)."""
    hparams: dict[str, Any] = {}
    for number, start in _fields(content):
        if number != 3:  # session_start_info
            continue
        for entry_number, entry in _fields(start):
            if entry_number != 1:  # the hparams map
                continue
            key, value = "", None
            for part, data in _fields(entry):
                if part == 1:
                    key = data.decode("utf-8", "replace")
                elif part == 2:
                    value = _protobuf_value(data)
            hparams[key] = value
    return hparams


_TENSOR_FORMATS = {1: "f", 2: "d", 3: "i", 9: "q"}  # DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64


def tensor_number(tensor: Any) -> float | None:
    """The one number of a scalar tensor (`add_scalar(new_style=True)`, TF2's summaries)."""
    for name in ("float_val", "double_val", "int_val", "int64_val"):
        values = getattr(tensor, name, ())
        if len(values) == 1:
            return float(values[0])
    content = getattr(tensor, "tensor_content", b"")
    code = _TENSOR_FORMATS.get(getattr(tensor, "dtype", 0))
    if content and code and len(content) == struct.calcsize(code):
        return float(struct.unpack("<" + code, content)[0])
    return None


def histogram_values(value: Any) -> list[float]:
    """Values standing for a histogram summary, a `HistogramProto` (`histo`)
    or the histograms plugin's tensor of (left, right, count) rows (as
    TensorBoard's `EventFileLoader` hands it over): each bucket's count of
    values at its centre, at most `MAX_HISTOGRAM_VALUES` in all."""
    if value.WhichOneof("value") == "histo":
        histo = value.histo
        lefts = [histo.min, *histo.bucket_limit[:-1]]
        buckets = [(max(left, histo.min), min(right, histo.max), count) for left, right, count in zip(lefts, histo.bucket_limit, histo.bucket)]
    else:
        tensor = value.tensor
        code = _TENSOR_FORMATS.get(tensor.dtype, "d")
        content = tensor.tensor_content
        flat = struct.unpack(f"<{len(content) // struct.calcsize(code)}{code}", content) if content else (*tensor.double_val, *tensor.float_val)
        buckets = [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat) - 2, 3)]
    total = sum(count for _, _, count in buckets)
    if not total:
        return []
    scale = min(1.0, MAX_HISTOGRAM_VALUES / total)
    values: list[float] = []
    for left, right, count in buckets:
        values.extend([(left + right) / 2] * round(count * scale))
    return values


def image_png(value: Any) -> bytes:
    """The (first) encoded image of an image summary: `image`, or the images
    plugin's tensor (width, height, then the images) as `EventFileLoader` gives it."""
    if value.WhichOneof("value") == "image":
        return bytes(value.image.encoded_image_string)
    return bytes(value.tensor.string_val[2])
