"""A local S3 API server (moto's server mode) for object-store tests of the file connectors.

It answers on 127.0.0.1 over real HTTP, so Spark's Python workers and crash-harness children in
other processes reach it just like a real object store. fsspec/s3fs options for it come from
:meth:`S3Server.storage_options`; the same values are exported as the standard AWS environment
variables so ``s3://`` paths work without passing options.
"""

from __future__ import annotations

import os


class S3Server:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)

    def start(self) -> S3Server:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            }
        )
        return self

    def storage_options(self) -> dict[str, object]:
        return {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": self.endpoint_url}}

    def create_bucket(self, name: str) -> str:
        import s3fs

        s3fs.S3FileSystem(**self.storage_options()).mkdir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        self._server.stop()
