"""A real S3-protocol server for the storage tests: moto's standalone server.

Why a helper module: the mirror (rltrack.trackers.storage) and its readers
are tested against an S3 endpoint they reach over HTTP, as on a cluster.
moto's `ThreadedMotoServer` serves on 127.0.0.1 and a free port inside the
test process; its buckets live in the process, so `stop` then `start` on the
same port is an outage that keeps what was stored. Clients find it through
the environment (`AWS_ENDPOINT_URL`, made-up credentials), which the agent a
logger starts inherits; pyarrow, boto3 and Ray Tune all read it.
"""

from __future__ import annotations

from typing import Iterator

import pytest

BUCKET = "rltrack-test"


class S3Server:
    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise

        self._cls = ThreadedMotoServer
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        self.env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}",
        }
        self.client().create_bucket(Bucket=BUCKET)

    def uri(self, prefix: str) -> str:
        """The storage URI of `prefix` in the bucket."""
        return f"s3://{BUCKET}/{prefix}"

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip

    def keys(self, prefix: str) -> dict[str, int]:
        """Every object under `prefix` of the bucket: key -> size."""
        found: dict[str, int] = {}
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            found.update({item["Key"]: item["Size"] for item in page.get("Contents", [])})
        return found

    def read(self, key: str) -> bytes:
        return self.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()  # type: ignore[no-any-return]

    def stop(self) -> None:
        """The outage: nothing listens on the port until `start`."""
        self._server.stop()

    def start(self) -> None:
        self._server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto S3 server with one bucket (`BUCKET`), its endpoint and
    credentials in this process's environment (children inherit them), and a
    user cache of the test's own (`--root <URI>` keeps its copy there)."""
    pytest.importorskip("moto", reason="moto[server] (requirements/test.txt) gives the S3-protocol server")
    server = S3Server()
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RLTRACK_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        yield server
    finally:
        server.stop()


__all__ = ["BUCKET", "S3Server", "s3"]
