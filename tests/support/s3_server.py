"""moto's S3 server on 127.0.0.1 for the shipping tests: a real S3 API over HTTP (it enforces If-None-Match).

``s3_server()`` starts one (port 0: a free port), creates a bucket, and points the standard variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``...) at it, in this process's environment, so the shipper
processes the recorders start find it as users' jobs find theirs; ``stop()`` puts the environment back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

BUCKET = "envrec-test"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret-key-42",
               "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class S3Server:
    server: object
    endpoint: str
    saved: dict = field(default_factory=dict)

    def url(self, path: str) -> str:
        return f"s3://{BUCKET}/{path}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint)

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def stop(self) -> None:
        self.server.stop()
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def s3_server() -> S3Server:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, **CREDENTIALS}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s = S3Server(server, endpoint, saved)
    s.client().create_bucket(Bucket=BUCKET)
    return s
