"""tools/verify_published.py, the separately scheduled full verification: every listed file's sha256, by the
storage's own digest (S3 ChecksumSHA256 per object, release asset digests per tag) or by its bytes
(--download, or where the storage reports none), against real loopback servers. An altered or missing
file is exit 1 naming it; an unreadable manifest exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from index.storage_servers import S3_CREDENTIALS, environment, http_server, release_assets, s3_server
from index.synthetic_wheels import make_wheel
from kiln_tool.index import build_index
from kiln_tool.index.storage import open_storage

REPO = Path(__file__).resolve().parents[2]
VERIFY = REPO / "tools" / "verify_published.py"


def _verify(url: str, config: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(VERIFY), url, "--storage", str(config), *extra],
                          capture_output=True, text=True, env=env, timeout=300)


def test_s3_objects_are_verified_by_their_checksums_and_bytes(tmp_path: Path) -> None:
    with s3_server() as s3:
        env = {**os.environ, **S3_CREDENTIALS}
        make_wheel(tmp_path / "dist", version="0.1.0+pt213cpu")
        wheel = make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
        site = tmp_path / "site"
        with environment(env):
            build_index(tmp_path / "dist", site, None, audit=None, storage=open_storage(s3.config(), repository=None,
                                                                                         tag=None))
        config = tmp_path / "storage.json"
        config.write_text(json.dumps(s3.config()))
        with http_server(site) as pages:
            ok = _verify(pages.url, config, env)
            assert ok.returncode == 0, ok.stdout + ok.stderr
            assert "verified 4 file(s) of 2 listed wheel(s); 0 problem(s)" in ok.stdout
            assert _verify(pages.url, config, env, "--download").returncode == 0

            # Same size, other bytes, put behind kiln's back (with the new bytes' own checksum): caught by the
            # checksum the bucket reports.
            client: Any = s3.client()
            data = bytearray(wheel.read_bytes())
            data[-1] ^= 1
            client.put_object(Bucket=s3.bucket, Key=f"wheels/{wheel.name}", Body=bytes(data),
                              ChecksumAlgorithm="SHA256")
            altered = _verify(pages.url, config, env)
            assert altered.returncode == 1, altered.stdout + altered.stderr
            assert f"{wheel.name}: s3:{s3.bucket}/wheels/{wheel.name} reports sha256" in altered.stderr

            # Without a checksum in the bucket, the bytes are hashed.
            client.put_object(Bucket=s3.bucket, Key=f"wheels/{wheel.name}", Body=bytes(data))
            unreported = _verify(pages.url, config, env)
            assert unreported.returncode == 1 and "serves sha256" in unreported.stderr

            client.delete_object(Bucket=s3.bucket, Key=f"wheels/{wheel.name}.metadata")
            gone = _verify(pages.url, config, env)
            assert gone.returncode == 1 and f"{wheel.name}.metadata: missing from" in gone.stderr


def test_release_assets_are_verified_by_their_digests(tmp_path: Path) -> None:
    with release_assets(tmp_path) as assets:
        wheel = make_wheel(tmp_path / "dist")
        site = tmp_path / "site"
        with environment(assets.env()):
            storage = open_storage({"backend": "github-release"}, repository="opkiln/opkiln", tag="v0.1.0")
            build_index(tmp_path / "dist", site, None, audit=None, storage=storage)
        config = tmp_path / "storage.json"
        config.write_text(json.dumps({"backend": "github-release", "repository": "opkiln/opkiln"}))
        with http_server(site) as pages:
            ok = _verify(pages.url, config, assets.env())
            assert ok.returncode == 0, ok.stdout + ok.stderr
            lied = _verify(pages.url, config, assets.env(FAKE_GH_LIE_DIGEST=wheel.name))
            assert lied.returncode == 1 and "github-release:opkiln/opkiln@v0.1.0 reports sha256" in lied.stderr
            (assets.release_dir("opkiln/opkiln", "v0.1.0") / wheel.name).unlink()
            gone = _verify(pages.url, config, assets.env())
            assert gone.returncode == 1 and f"{wheel.name}: missing from" in gone.stderr
            (site / "kiln-index.json").write_text("{")
            assert _verify(pages.url, config, assets.env()).returncode == 2
