"""pip and uv, from the served site, get exactly the published bytes (synthetic kiln wheels: fast, no torch)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from index.helpers import Server, kiln_index
from index.synthetic_wheels import make_wheel
from index.test_install import _uv


def test_pip_and_uv_get_exactly_the_published_bytes(server: Server, tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    out = server.root / "served-bytes"
    result = kiln_index(tmp_path / "dist", out)
    assert result.returncode == 0, result.stderr
    (published,) = (out / "wheels").glob("*.whl")
    digest = hashlib.sha256(published.read_bytes()).hexdigest()
    url = f"{server.url}served-bytes/"

    got = tmp_path / "pip"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir", "--no-index",
                    "-f", f"{url}cpu/torch2.13/", "-d", str(got), "opkiln"], check=True, timeout=300)
    (downloaded,) = got.glob("*.whl")
    assert hashlib.sha256(downloaded.read_bytes()).hexdigest() == digest

    target = tmp_path / "uv"
    subprocess.run([_uv(), "pip", "install", "-q", "--no-deps", "--no-cache", "--python", sys.executable,
                    "--target", str(target), "--index-url", f"{url}simple", "opkiln"], check=True, timeout=300)
    with zipfile.ZipFile(published) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.filename.endswith("/RECORD"):
                continue
            assert (target / info.filename).read_bytes() == zf.read(info), info.filename
