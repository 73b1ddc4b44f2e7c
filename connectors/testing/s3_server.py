"""A local S3 API server (moto's server mode) for object-store tests of the file connectors.

It answers on 127.0.0.1 over real HTTP, so Spark's Python workers and crash-harness children in
other processes reach it just like a real object store. fsspec/s3fs options for it come from
:meth:`S3Server.storage_options`; the same values are exported as the standard AWS environment
variables so ``s3://`` paths work without passing options.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from urllib.parse import urlparse


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



class FlakyProxy:
    """A TCP proxy in front of a server (the S3 server) that can fail for a while.

    ``fail("503")`` answers every request on a new connection with ``503 Slow Down``, as S3 does
    when it throttles; ``fail("reset")`` resets every new connection; both first reset the
    connections already open, so clients with pooled connections meet the failure at once.
    ``heal()`` passes traffic through again. ``failures`` counts the connections it failed.
    """

    _SLOW_DOWN = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                  b"Content-Length: 87\r\n\r\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate."
                  b"</Message></Error>")  # fmt: skip

    def __init__(self, upstream_url: str) -> None:
        url = urlparse(upstream_url)
        self.upstream = (url.hostname, url.port)
        self.mode, self.failures = "pass", 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def storage_options(self) -> dict[str, object]:
        return {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": self.endpoint_url}}

    def fail(self, mode: str) -> None:
        assert mode in ("503", "reset"), mode
        with self._lock:
            self.mode = mode
            opened, self._open = self._open, set()
        for conn in opened:
            _reset(conn)

    def heal(self) -> None:
        self.mode = "pass"

    def stop(self) -> None:
        self._listener.close()
        self.fail("reset")

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # stopped
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.mode != "pass":
            self.failures += 1
            if self.mode == "503":
                try:
                    client.settimeout(10)
                    client.recv(65536)  # the request's head; the answer does not wait for a body
                    client.sendall(self._SLOW_DOWN)
                except OSError:
                    pass
                client.close()
            else:
                _reset(client)
            return
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._open.update((client, server))
        threading.Thread(target=self._pump, args=(server, client), daemon=True).start()
        self._pump(client, server)

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        """Copy bytes from ``source`` to ``target`` until either side closes, then close both."""
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._open.difference_update((source, target))
        for conn in (source, target):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def _reset(conn: socket.socket) -> None:
    """Close ``conn`` with a TCP reset (SO_LINGER 0), as a crashed or overloaded server would.

    A ``recv`` blocked on ``conn`` in a pump thread keeps the socket alive past ``close()`` (a
    client waiting for an answer then waited out its read timeout, 60 s per pooled connection in
    botocore), so the reader is woken first: ``SHUT_RD`` sends nothing and ends that ``recv``."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    conn.close()
