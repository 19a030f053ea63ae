"""Storage beside the local root: object stores and shared file systems by URI.

A storage URI names a place every node of a cluster can reach: `s3://bucket/prefix`,
`gs://bucket/prefix`, `file:///shared/runs`, `hdfs://...` (what `pyarrow.fs`
opens, as Ray Tune does), or any other fsspec protocol (wrapped for
`pyarrow.fs`, as Tune wraps it). Settings ride in the URI's query, as
`pyarrow.fs` reads them (`s3://bucket/exp?endpoint_override=host:9000&scheme=http`),
or in the client's environment (`AWS_ENDPOINT_URL`, credentials).

`Storage` is the one handle rltrack's mirror (rltrack.trackers.storage) and
its readers (rltrack.runs.storage_root, `rltrack pull`) use: whole objects
written at fixed names (a retried write replaces the same object, never
makes a second), listed and read back. pyarrow is imported only here, and
only when a URI is opened (the `storage` extra).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from rltrack.core.optional import require

#: `scheme://...`: a URI rather than a local path (a Windows drive `C:\` has one letter before its colon).
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+://")


def is_uri(text: str | os.PathLike[str]) -> bool:
    """Whether `text` is a storage URI (`s3://...`, `file:///...`) rather than a local path."""
    return isinstance(text, str) and bool(_URI.match(text))


def refuse_uri_as_path(value: Any, where: str, fix: str) -> None:
    """Raises ValueError, in one sentence, when a URI is given where a local
    directory is expected: `Path("s3://b/p")` would make a local `./s3:/b/p`."""
    if is_uri(value):
        raise ValueError(f"{where} = {value!r} is a storage URI, not a local directory: {fix}")


def join(uri: str, relative: str) -> str:
    """`relative` (a `/`-separated path) appended to the path of `uri`, its query kept."""
    parts = urlsplit(uri)
    path = parts.path.rstrip("/") + "/" + relative.strip("/") if relative.strip("/") else parts.path
    return parts._replace(path=path).geturl()


def uri_of(filesystem: Any, path: str) -> str:
    """The URI of `path` on a `pyarrow.fs` filesystem, its scheme and (for S3)
    its endpoint kept: Ray Tune resolves `storage_path` into such a pair and
    keeps no URI (a trial's `path` is `bucket/exp/trial`, without `s3://`)."""
    kind = getattr(filesystem, "type_name", "local")
    if kind == "local":
        return str(Path(path))
    if kind == "s3":  # an endpoint named in the URI stays in it; one from the environment (AWS_ENDPOINT_URL) stays there
        settings = filesystem.__reduce__()[1][0]
        named = settings.get("endpoint_override") and settings["endpoint_override"] != os.environ.get("AWS_ENDPOINT_URL")
        query = [f"{key}={settings[key]}" for key in ("endpoint_override", "scheme", "region") if settings.get(key)]
        return f"s3://{path}" + ("?" + "&".join(query) if named else "")
    if kind == "gcs":
        return f"gs://{path}"
    handler = getattr(filesystem, "handler", None)  # fsspec wrapped in PyFileSystem(FSSpecHandler(...))
    protocol = getattr(getattr(handler, "fs", None), "protocol", None) or kind
    protocol = protocol[0] if isinstance(protocol, (tuple, list)) else protocol
    return f"{protocol}://{path}"


@dataclass(frozen=True)
class Entry:
    """One object under a storage URI: its path relative to the URI, size and modification time (ns; 0 unknown)."""

    path: str
    size: int
    mtime_ns: int


class Storage:
    """The objects under one storage URI (`root`), addressed by relative `/`-separated paths."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._fs, base = _filesystem(uri)
        self._base = base.rstrip("/")

    def _path(self, relative: str) -> str:
        return f"{self._base}/{relative.strip('/')}" if relative.strip("/") else self._base

    def put(self, relative: str, data: bytes) -> None:
        """Writes the object at `relative` whole (replacing it if it exists)."""
        path = self._path(relative)
        self._make_parent(path)
        with self._fs.open_output_stream(path) as out:
            out.write(data)

    def put_file(self, relative: str, local: Path) -> None:
        """Copies the local file `local` to the object at `relative` (whole, replacing it)."""
        path = self._path(relative)
        self._make_parent(path)
        with local.open("rb") as source, self._fs.open_output_stream(path) as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)

    def get(self, relative: str) -> bytes:
        with self._fs.open_input_stream(self._path(relative)) as stream:
            return bytes(stream.read())

    def entries(self, relative: str = "") -> Iterator[Entry]:
        """Every object under `relative`, recursively (nothing if it does not exist)."""
        import pyarrow.fs

        top = self._path(relative)
        selector = pyarrow.fs.FileSelector(top, recursive=True, allow_not_found=True)
        for info in self._fs.get_file_info(selector):
            if info.type == pyarrow.fs.FileType.File:
                mtime = info.mtime_ns or 0
                yield Entry(info.path[len(self._base) :].lstrip("/"), int(info.size or 0), int(mtime))

    def _make_parent(self, path: str) -> None:
        """A shared file system needs the folders an object store does without."""
        if getattr(self._fs, "type_name", "") == "local":
            self._fs.create_dir(path.rpartition("/")[0], recursive=True)


def _filesystem(uri: str) -> tuple[Any, str]:
    """`pyarrow.fs` filesystem and path of `uri`; a protocol pyarrow does not
    know is opened through fsspec (as Ray Tune does)."""
    fs = require("pyarrow.fs", "storage", f"storage {uri!r}")
    try:
        return fs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow.lib.ArrowInvalid: unknown scheme
        if "Unrecognized filesystem type" not in str(exc):
            raise
    fsspec = require("fsspec", "storage", f"storage {uri!r}")
    protocol, _, path = uri.partition("://")
    handler = fs.FSSpecHandler(fsspec.filesystem(protocol))
    return fs.PyFileSystem(handler), path
