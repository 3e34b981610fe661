"""Signed indexes for the signing tests: real OpenSSH keys, synthetic wheels, `kiln index` and the release's own
signing step (kiln_tool.signing), served by a real HTTP server on 127.0.0.1 (index.storage_servers)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from index.synthetic_wheels import make_wheel
from kiln_tool.guard.signed import SshIdentity
from kiln_tool.index import build_index
from kiln_tool.signing import SshSigner, fetch_chain, sign_release

PRINCIPAL = "releases@opkiln.example"


@dataclass(frozen=True)
class Keys:
    release: Path  # the project's private key
    other: Path  # somebody else's
    allowed_signers: Path  # names the release key's public half for PRINCIPAL

    @property
    def identity(self) -> SshIdentity:
        return SshIdentity(self.allowed_signers, PRINCIPAL)


def make_keys(folder: Path) -> Keys:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("release", "other"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(folder / name)],
                       check=True, timeout=60)
    allowed = folder / "allowed_signers"
    allowed.write_text(f"{PRINCIPAL} {(folder / 'release.pub').read_text()}")
    return Keys(folder / "release", folder / "other", allowed)


def release(site: Path, dist: Path, key: Path) -> str:
    """One release onto the local site: `kiln index` merges DIST, then the chain is extended and signed."""
    build_index(dist, site, audit=None)
    return sign_release(site, "opkiln", SshSigner(key), fetch_chain(None, "opkiln", site), dist, say=lambda _m: None)


@dataclass(frozen=True)
class History:
    """Two signed releases of one index: ``first`` (wheel A) and ``second`` (A and B), each as a whole site."""

    first: Path
    second: Path
    wheel_a: Path
    wheel_b: Path


def two_releases(tmp: Path, keys: Keys) -> History:
    dist1, dist2 = tmp / "dist1", tmp / "dist2"
    wheel_a = make_wheel(dist1, version="0.1.0+pt213cpu")
    wheel_b = make_wheel(dist2, version="0.2.0+pt213cpu", extra_files={"opkiln/ops.py": b"OPS = 2\n"})
    site = tmp / "site"
    release(site, dist1, keys.release)
    first = tmp / "first"
    shutil.copytree(site, first)
    release(site, dist2, keys.release)
    return History(first, site, wheel_a, wheel_b)
