"""Real servers for the storage tests, on loopback: pages on 127.0.0.1, wheels on 127.0.0.2.

- an HTTP server (http.server) for a folder, on a chosen loopback address;
- a local S3-compatible server: moto's server mode (`python -m moto.server`, requirements/storage-test.txt),
  on 127.0.0.2, with a bucket whose policy lets anyone GET objects (as a bucket behind a CDN is set up);
- a stand-in `gh` (tools/fake_gh.py, NOT GitHub's CLI) on PATH, keeping release assets in a folder that
  the wheel host serves, the way github.com serves browser_download_url.
Every server is ended by the fixture that started it.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_GH = REPO / "tools" / "fake_gh.py"
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "kiln-test", "AWS_SECRET_ACCESS_KEY": "kiln-test",
                  "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class Http:
    root: Path
    url: str
    requests: list[str] = field(default_factory=list)


@contextmanager
def http_server(root: Path, host: str = "127.0.0.1") -> Iterator[Http]:
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            requests.append(self.path)

    def handler(*args: object, **kwargs: object) -> Handler:
        return Handler(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Http(root=root, url=f"http://{host}:{server.server_address[1]}/", requests=requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class S3:
    endpoint: str
    bucket: str

    def client(self) -> object:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="kiln-test", aws_secret_access_key="kiln-test")

    def config(self, prefix: str = "wheels/", metadata: bool = True) -> dict[str, object]:
        return {"backend": "s3", "bucket": self.bucket, "prefix": prefix, "endpoint_url": self.endpoint,
                "region": "us-east-1", "public_url": f"{self.endpoint}/{self.bucket}/", "metadata": metadata}


@contextmanager
def s3_server(host: str = "127.0.0.2") -> Iterator[S3]:
    """moto's S3 server in its own process; a fresh bucket readable by anyone."""
    pytest.importorskip("moto.server", reason="the S3 tests need moto[server] (requirements/storage-test.txt)")
    pytest.importorskip("boto3", reason="the S3 backend needs boto3 (requirements/storage-test.txt)")
    port = _free_port(host)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **S3_CREDENTIALS})
    endpoint = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start: {proc.stderr.read().decode()[-2000:]}"
                                       if proc.stderr else "moto server did not start") from None
                time.sleep(0.1)
        s3 = S3(endpoint=endpoint, bucket="kiln-wheels")
        client = s3.client()
        client.create_bucket(Bucket=s3.bucket)  # type: ignore[attr-defined]
        client.put_bucket_policy(Bucket=s3.bucket, Policy=json.dumps({  # type: ignore[attr-defined]
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                           "Resource": f"arn:aws:s3:::{s3.bucket}/*"}]}))
        yield s3
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Assets:
    """Release assets kept by the stand-in gh, served by a real HTTP server."""

    root: Path
    host: Http
    bin_dir: Path

    def env(self, **extra: str) -> dict[str, str]:
        path = f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}"
        return {**os.environ, "PATH": path, "FAKE_GH_ROOT": str(self.root), "FAKE_GH_DOWNLOAD_URL": self.host.url,
                **extra}

    def release_dir(self, repository: str, tag: str) -> Path:
        return self.root / repository / "releases" / "download" / tag


@contextmanager
def release_assets(tmp: Path, host: str = "127.0.0.2") -> Iterator[Assets]:
    root = tmp / "github-assets"
    root.mkdir(parents=True)
    bin_dir = tmp / "fake-gh-bin"
    subprocess.run([sys.executable, str(FAKE_GH), "install", str(bin_dir)], check=True, capture_output=True)
    with http_server(root, host) as served:
        yield Assets(root=root, host=served, bin_dir=bin_dir)


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """os.environ as ``env`` for the duration (for in-process calls that run gh or boto3)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
