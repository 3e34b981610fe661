"""A release signs what it publishes (docs/verifying.md).

After `kiln index` has rendered the release's SITE, :func:`sign_release` writes the next release manifest
(kiln_tool.guard.signed: every page, kiln-index.json, every wheel, METADATA and sdist wherever it is stored, chained
to the manifest before it by sha256), signs it and carries the published chain forward, so SITE, deployed
whole, serves every release manifest ever signed. Signers:

- key mode: OpenSSH, ``ssh-keygen -Y sign -n kiln-release`` with the project's key (users verify against an
  allowed-signers file): :class:`SshSigner`;
- keyless: sigstore-python with the workflow's ambient OIDC identity (GitHub Actions ``id-token: write``):
  :class:`SigstoreSigner`; the bundle is sigstore's own format.

Append-only: a release manifest or signature that the published chain already holds is never written over;
with a storage (a bucket, release assets) the new manifest and its signature are also put there beside the
wheels, through the storage's own never-overwrite put.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..guard.signed import (
    LATEST,
    MAX_SIGNATURE_BYTES,
    RELEASES_DIR,
    SIGSTORE_SUFFIX,
    SSH_NAMESPACE,
    SSH_SUFFIX,
    Chain,
    FileEntry,
    VerifyError,
    dir_fetcher,
    http_fetcher,
    read_chain,
    release_document,
    wheel_content_digest,
)

if TYPE_CHECKING:
    from ..index.storage import Stored


class SigningError(RuntimeError):
    exit_code = 2


class Signer(Protocol):
    @property
    def suffix(self) -> str:
        """The signature's file suffix beside the manifest (.sig, .sigstore.json)."""

    def check(self) -> None:
        """Raise SigningError now, before a release uploads anything, when this signer cannot sign."""

    def sign(self, raw: bytes) -> bytes: ...


@dataclass(frozen=True)
class SshSigner:
    """``ssh-keygen -Y sign`` with a private key file (ed25519 recommended; a key held by ssh-agent works too
    when ``key`` is its public half)."""

    key: Path
    suffix: str = SSH_SUFFIX

    def check(self) -> None:
        if shutil.which("ssh-keygen") is None:
            raise SigningError("ssh-keygen is not on PATH (OpenSSH's client signs key-mode releases)")
        if not self.key.is_file():
            raise SigningError(f"--sign-key {self.key}: no such file")

    def sign(self, raw: bytes) -> bytes:
        self.check()
        keygen = shutil.which("ssh-keygen") or "ssh-keygen"
        with tempfile.TemporaryDirectory(prefix="kiln-sign-") as tmp:
            target = Path(tmp, "release.json")
            target.write_bytes(raw)
            done = subprocess.run([keygen, "-Y", "sign", "-q", "-f", str(self.key), "-n", SSH_NAMESPACE, str(target)],
                                  capture_output=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
            signature = target.with_name("release.json.sig")
            if done.returncode != 0 or not signature.is_file():
                detail = " ".join(done.stderr.decode("utf-8", "replace").split())[:300]
                raise SigningError(f"ssh-keygen -Y sign with {self.key} failed: {detail or 'no signature'}")
            return signature.read_bytes()


@dataclass(frozen=True)
class SigstoreSigner:
    """Keyless: the ambient OIDC token of the CI job (sigstore.oidc.detect_credential), Fulcio and Rekor of the
    public sigstore instance. ``token``: an identity token given explicitly (else detected)."""

    token: str | None = None
    suffix: str = SIGSTORE_SUFFIX

    def check(self) -> None:
        self._token()

    def _token(self) -> str:
        try:
            from sigstore.oidc import detect_credential
        except ImportError:
            raise SigningError("keyless signing needs sigstore-python: pip install 'torch-kiln[signing]' "
                               "(kiln_tool/data/requirements/signing.lock pins it with hashes)") from None
        token = self.token or detect_credential()
        if not token:
            raise SigningError("keyless signing: no ambient OIDC credential (in GitHub Actions the job needs "
                               "`permissions: id-token: write`); sign with --sign-key elsewhere")
        return str(token)

    def sign(self, raw: bytes) -> bytes:
        token = self._token()
        try:
            from sigstore.models import ClientTrustConfig
            from sigstore.oidc import IdentityToken
            from sigstore.sign import SigningContext
        except ImportError:
            raise SigningError("keyless signing needs sigstore-python: pip install 'torch-kiln[signing]'") from None
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        with context.signer(IdentityToken(token), cache=True) as signer:
            bundle = signer.sign_artifact(raw)
        return bundle.to_json().encode("utf-8")


# -- the published chain, carried forward -------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedChain:
    chain: Chain | None
    files: dict[str, bytes]  # every releases/* file and kiln-release.json, as published


def fetch_chain(published_url: str | None, project: str, site: Path | None = None) -> PublishedChain:
    """The published release chain (hashes and order checked, not signatures: the release's signer is not
    necessarily a verifier), with every file of it, to be carried into the new SITE unchanged."""
    if published_url is None and site is None:
        return PublishedChain(None, {})
    fetcher = http_fetcher(published_url) if published_url is not None else dir_fetcher(site or Path())
    seen: dict[str, bytes] = {}

    def fetch(path: str, limit: int) -> bytes | None:
        data = fetcher(path, limit)
        if data is not None:
            seen[path] = data
        return data

    try:
        chain = read_chain(fetch, None, project)
        if chain is not None:
            for release in chain.releases:
                for suffix in (SSH_SUFFIX, SIGSTORE_SUFFIX):
                    fetch(release.name + suffix, MAX_SIGNATURE_BYTES)
    except VerifyError as exc:
        raise SigningError(f"the published release chain: {exc}") from None
    if chain is not None and not any(k.endswith((SSH_SUFFIX, SIGSTORE_SUFFIX)) for k in seen):
        raise SigningError("the published release chain carries no signature")
    return PublishedChain(chain, seen)


def _site_files(site: Path, known: dict[str, str | None]) -> list[FileEntry]:
    """Every file of SITE (the chain's own files aside); a wheel's content digest is taken from the previous
    signed release when its sha256 is the same (a release reads only its new wheels' members)."""
    entries = []
    for path in sorted(site.rglob("*")):
        rel = path.relative_to(site).as_posix()
        if rel == LATEST or rel.startswith(f"{RELEASES_DIR}/") or path.is_dir():
            continue
        if path.is_symlink() or not path.is_file():
            raise SigningError(f"{path}: not a regular file; refusing to sign it")
        data = path.read_bytes()
        kind = "manifest" if rel == "kiln-index.json" else "wheel" if rel.endswith(".whl") else \
            "metadata" if rel.endswith(".whl.metadata") else "sdist" if rel.endswith(".tar.gz") else "page"
        sha256 = hashlib.sha256(data).hexdigest()
        content = None
        if kind == "wheel":
            content = known[sha256] if known.get(sha256) else wheel_content_digest(path)
        entries.append(FileEntry(rel, kind, sha256, len(data), content))
    return entries


def release_files(site: Path, snapshot: Path | None, previous: Chain | None) -> list[FileEntry]:
    """Every file the index serves: the site's own files, and every wheel (and METADATA) it links in storage,
    with the content digest of new wheels from the snapshot and of older ones from the signed chain."""
    from ..index.manifest import load_manifest

    known = {f.sha256: f.content for f in (previous.head.files.values() if previous else ()) if f.kind == "wheel"}
    files = _site_files(site, known)
    manifest = load_manifest(site)
    if manifest is None:
        raise SigningError(f"{site}: no kiln-index.json to sign")
    for wheel in manifest.wheels.values():
        if wheel.url is None:
            continue
        content = known.get(wheel.sha256)
        local = snapshot / wheel.filename if snapshot is not None else None
        if local is not None and local.is_file():
            content = wheel_content_digest(local)
        files.append(FileEntry(wheel.url, "wheel", wheel.sha256, wheel.size, content))
        if wheel.metadata_beside:
            files.append(FileEntry(f"{wheel.url}.metadata", "metadata", wheel.metadata_sha256,
                                   _metadata_size(local)))
    files += [FileEntry(sdist.url, "sdist", sdist.sha256, sdist.size) for sdist in manifest.sdists.values()
              if sdist.url is not None]
    return files


def _metadata_size(snapshot_wheel: Path | None) -> int:
    """METADATA's size is not in kiln-index.json; a new wheel's is read from it, an older one's is 0 (its sha256
    alone is checked)."""
    import zipfile

    if snapshot_wheel is not None and snapshot_wheel.is_file():
        with zipfile.ZipFile(snapshot_wheel) as archive:
            for info in archive.infolist():
                if info.filename.endswith(".dist-info/METADATA") and info.filename.count("/") == 1:
                    return info.file_size
    return 0


def _write_once(target: Path, data: bytes) -> None:
    """Append-only: a file of the chain is written where there is none; one already there must hold these bytes."""
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise SigningError(f"{target}: not a regular file; refusing to write the release chain over it")
    if target.is_file():
        if target.read_bytes() != data:
            raise SigningError(f"{target}: already holds other bytes; a signed release is never replaced")
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("xb") as out:
        out.write(data)
    target.chmod(0o644)


class Putter(Protocol):
    """What signing needs of a storage (index/storage.py's Storage has it)."""

    def stat(self, name: str) -> Stored | None: ...

    def read(self, name: str) -> bytes: ...

    def put(self, name: str, path: Path, sha256: str) -> None: ...


def _adopted_signature(storage: Putter | None, name: str, raw: bytes, suffix: str) -> bytes | None:
    """The signature an interrupted run of this very release already stored (its manifest there has these bytes):
    adopted, as a stored wheel of the same bytes is, so a rerun is not refused for a keyless signature that
    differs each time it is made. None when the storage holds no such manifest."""
    if storage is None:
        return None
    manifest, signature = name.rsplit("/", 1)[-1], name.rsplit("/", 1)[-1] + suffix
    found = storage.stat(manifest)
    if found is None or storage.stat(signature) is None:
        return None
    if (found.sha256 or hashlib.sha256(storage.read(manifest)).hexdigest()) != hashlib.sha256(raw).hexdigest():
        return None  # another manifest under this name: the put below refuses it
    return storage.read(signature)


def sign_release(site: Path, project: str, signer: Signer, published: PublishedChain,
                 snapshot: Path | None = None, storage: Putter | None = None,
                 say: Callable[[str], None] = print) -> str:
    """Write the published chain back into SITE unchanged, then the next release manifest, its signature and
    kiln-release.json. ``storage`` (index/storage.py): also store the new manifest and signature beside the wheels,
    through its never-overwrite put. Returns the new manifest's path in SITE."""
    for rel, data in published.files.items():
        if rel != LATEST:
            _write_once(site / rel, data)
    previous = published.chain
    sequence = previous.head.sequence + 1 if previous else 1
    files = release_files(site, snapshot, previous)
    raw = release_document(project, sequence, previous.head.sha256 if previous else None, files)
    name = f"{RELEASES_DIR}/release-{sequence:06d}.json"
    adopted = _adopted_signature(storage, name, raw, signer.suffix)
    signature = adopted if adopted is not None else signer.sign(raw)
    written: list[Path] = []
    for rel, data in ((name, raw), (name + signer.suffix, signature)):
        _write_once(site / rel, data)
        written.append(site / rel)
    latest = site / LATEST
    latest.write_bytes(raw)
    latest.chmod(0o644)
    if storage is not None and adopted is None:
        for target in written:
            storage.put(target.name, target, hashlib.sha256(target.read_bytes()).hexdigest())
    say(f"release: signed {name} ({len(files)} file(s), chained to "
        f"{'release ' + str(previous.head.sequence) if previous else 'nothing: the first signed release'}) "
        f"with {type(signer).__name__.removesuffix('Signer').lower() or 'a signer'}")
    return name


__all__ = ["PublishedChain", "Putter", "Signer", "SigningError", "SigstoreSigner", "SshSigner", "fetch_chain",
           "release_files", "sign_release"]
