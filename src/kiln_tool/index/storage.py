"""Where published wheels live: append-only storage, chosen by configuration (data/storage.json).

The site (pages and kiln-index.json) links each wheel by its absolute URL with ``#sha256=``; the
wheels themselves go to one of:

- ``site``: the site folder itself (wheels/NAME, today's behaviour: small or self-hosted sites);
- ``github-release``: assets of the release of the tag (immutable per release, no total cap);
- ``s3``: an S3-compatible bucket (download.openmmlab.com-style hosting behind a CDN).

Every backend obeys one protocol (upload before publish, never overwrite):
``put`` refuses an existing name (the caller compares digests first), ``stat`` reads back what the
storage itself reports (size and sha256: the release asset's ``digest``, the S3 object's
``ChecksumSHA256`` uploaded with it), and a wheel is listed only once its read-back matches.
The ``gh`` calls are isolated in :class:`GhCli` (``assets`` and ``upload``); tests put a stand-in
``gh`` on PATH (tools/fake_gh.py) and the workflow the real one.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import quote

from .. import resources
from .errors import IndexConflictError, IndexInputError, IndexIntegrityError

DEFAULT_CONFIG = Path("data") / "storage.json"
"""Relative to the project kiln serves (the current directory, or kiln -C DIR): where its wheels live."""
SCHEMA = resources.data_path("storage.schema.json")
BACKENDS = ("site", "github-release", "s3")
_CHUNK = 1 << 20


class StorageError(IndexInputError):
    """The storage cannot be reached or answers nonsense: exit 2, nothing listed."""


@dataclass(frozen=True)
class Stored:
    """What the storage itself says about one object."""

    name: str
    size: int
    sha256: str | None  # None: the storage keeps no sha256 of it (then the bytes are read back)
    complete: bool = True  # False: an upload that never finished (a GitHub asset in state "starter")


class Storage(Protocol):
    backend: str
    serves_metadata: bool

    def where(self) -> str:
        """The storage's own name for the place it writes (github-release:OWNER/REPO@TAG, s3:BUCKET/PREFIX)."""

    def stored_at(self, name: str) -> str: ...

    def url(self, name: str) -> str: ...

    def stat(self, name: str) -> Stored | None: ...

    def read(self, name: str) -> bytes: ...

    def put(self, name: str, path: Path, sha256: str) -> None: ...

    def listing(self, stored_at: str) -> dict[str, Stored] | None:
        """Every object of the place ``stored_at`` names (one call per tag / bucket), or None when that
        place is not this storage's to check."""


# -- configuration -------------------------------------------------------------------------------------


@functools.cache
def _validator() -> Callable[[Any], Any]:
    import fastjsonschema

    return cast(Callable[[Any], Any], fastjsonschema.compile(json.loads(SCHEMA.read_text(encoding="utf-8"))))


def check_config(doc: Any, where: str) -> dict[str, Any]:
    """A storage configuration held to data/storage.schema.json; IndexInputError (one line) when it is not."""
    import fastjsonschema

    try:
        _validator()(doc)
    except fastjsonschema.JsonSchemaValueException as exc:
        message = " ".join(str(exc.message).split())[:300]
        raise IndexInputError(f"{where}: not a storage configuration: {message}") from None
    return cast(dict[str, Any], doc)


def load_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        from ..project import project_dir

        path = project_dir() / DEFAULT_CONFIG
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IndexInputError(f"{path}: unreadable storage configuration ({exc.strerror})") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise IndexInputError(f"{path}: not JSON ({str(exc)[:200]})") from None
    return check_config(doc, str(path))


def open_storage(config: dict[str, Any], *, repository: str | None = None, tag: str | None = None,
                 gh: GhCli | None = None) -> Storage | None:
    """The storage a configuration names; None for ``site`` (the site folder: publish.py's own path).

    ``repository`` and ``tag`` (the command line, else $GITHUB_REPOSITORY / $TAG) fill what the
    configuration leaves to the run; a github-release storage without both is an error."""
    backend = config["backend"]
    metadata = bool(config.get("metadata", True))
    if backend == "site":
        return None
    if backend == "github-release":
        repository = repository or config.get("repository") or os.environ.get("GITHUB_REPOSITORY")
        tag = tag or os.environ.get("TAG")
        if not repository or not tag:
            raise IndexInputError("github-release storage: name the repository and the tag (--repository/--tag, "
                                  "or $GITHUB_REPOSITORY and $TAG)")
        check_config({**config, "repository": repository, "tag": tag}, "github-release storage")
        return GitHubReleaseStorage(gh or GhCli(), repository, tag, metadata)
    return S3Storage(bucket=config["bucket"], prefix=config.get("prefix", ""), endpoint_url=config.get("endpoint_url"),
                     region=config.get("region", "us-east-1"), public_url=config["public_url"], metadata=metadata)


# -- GitHub release assets -----------------------------------------------------------------------------


class GhCli:
    """The only place kiln calls ``gh``: the assets of a release, and an upload that never replaces one."""

    def __init__(self, executable: str = "gh", timeout: float = 600, env: dict[str, str] | None = None) -> None:
        self.executable = executable
        self.timeout = timeout
        self.env = env  # None: this process's environment (GH_TOKEN in the workflow)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([self.executable, *args], capture_output=True, text=True, timeout=self.timeout,
                                  check=False, env=self.env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StorageError(f"gh {' '.join(args[:2])}: {exc}") from None

    def assets(self, repository: str, tag: str) -> list[dict[str, Any]] | None:
        """The release's assets (gh's JSON: name, size, digest, state, url); None when there is no such release."""
        done = self._run("release", "view", tag, "--repo", repository, "--json", "assets")
        if done.returncode != 0:
            if "release not found" in done.stderr.lower():
                return None
            raise StorageError(f"gh release view {tag} --repo {repository}: {done.stderr.strip()[:300]}")
        try:
            assets = json.loads(done.stdout)["assets"]
        except (ValueError, KeyError, TypeError):
            raise StorageError(f"gh release view {tag}: unreadable answer {done.stdout[:200]!r}") from None
        if not isinstance(assets, list) or not all(isinstance(a, dict) for a in assets):
            raise StorageError(f"gh release view {tag}: 'assets' is not a list of objects")
        return assets

    def releases(self, repository: str) -> list[str]:
        """Every release's tag of the repository (a release's assets are one place wheels live)."""
        done = self._run("release", "list", "--repo", repository, "--json", "tagName", "--limit", "10000")
        if done.returncode != 0:
            raise StorageError(f"gh release list --repo {repository}: {done.stderr.strip()[:300]}")
        try:
            tags = [item["tagName"] for item in json.loads(done.stdout)]
        except (ValueError, KeyError, TypeError):
            raise StorageError(f"gh release list: unreadable answer {done.stdout[:200]!r}") from None
        if not all(isinstance(t, str) for t in tags):
            raise StorageError("gh release list: a tagName that is not a string")
        return tags

    def create(self, repository: str, tag: str) -> None:
        """The release of an existing tag (``--verify-tag``: never a new tag), published, not a draft: a draft's
        assets cannot be downloaded without a token."""
        done = self._run("release", "create", tag, "--repo", repository, "--verify-tag", "--title", tag,
                         "--notes", "Wheels for every supported torch x CUDA x Python; install from the wheel index "
                         "(the project's GitHub Pages), which links these assets by sha256.")
        if done.returncode != 0:
            raise StorageError(f"gh release create {tag} --repo {repository}: {done.stderr.strip()[:300]}")

    def upload(self, repository: str, tag: str, path: Path) -> None:
        """``gh release upload`` without --clobber: gh refuses a name that is already attached. The asset is
        named after the file (gh's FILE#LABEL sets only a label)."""
        done = self._run("release", "upload", tag, str(path), "--repo", repository)
        if done.returncode != 0:
            raise StorageError(f"gh release upload {tag} {path.name}: {done.stderr.strip()[:300]}")


def _sha256_of_digest(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("sha256:") or len(value) != 71:
        raise StorageError(f"{where}: digest {str(value)[:80]!r} is not sha256:<64 hex>")
    return value[7:].lower()


class GitHubReleaseStorage:
    backend = "github-release"

    def __init__(self, gh: GhCli, repository: str, tag: str, metadata: bool) -> None:
        self.gh, self.repository, self.tag, self.serves_metadata = gh, repository, tag, metadata
        self._urls: dict[str, str] = {}
        # This tag's assets as last listed: one `gh release view` answers every stat until the next upload
        # (a release of this matrix is ~324 files: one listing each would be ~324 API calls more).
        self._own: dict[str, Stored] | None = None
        self._exists: bool | None = None

    def where(self) -> str:
        return f"github-release:{self.repository}@{self.tag}"

    def stored_at(self, name: str) -> str:
        return self.where()

    def _assets(self, repository: str, tag: str) -> dict[str, Stored]:
        own = (repository, tag) == (self.repository, self.tag)
        if own and self._own is not None:
            return self._own
        assets = self.gh.assets(repository, tag)
        if own:
            self._exists = assets is not None
        if assets is None and own:
            self._own = {}
            return {}  # this release's own tag: created with its first upload
        if assets is None:
            raise StorageError(f"{repository}: no release {tag} (create it before the wheels are uploaded)")
        found = {}
        for asset in assets:
            name, size, url = asset.get("name"), asset.get("size"), asset.get("url")
            if not isinstance(name, str) or not isinstance(size, int) or not isinstance(url, str):
                raise StorageError(f"gh release view {tag}: an asset without name, size or url: {str(asset)[:200]}")
            complete = asset.get("state", "uploaded") == "uploaded"
            found[name] = Stored(name, size, _sha256_of_digest(asset.get("digest"), f"{tag}/{name}"), complete)
            if own:
                self._urls[name] = url
        if own:
            self._own = found
        return found

    def url(self, name: str) -> str:
        if name not in self._urls:
            self._own = None
            self._assets(self.repository, self.tag)
        if name not in self._urls:
            raise StorageError(f"{self.where()}: {name} is not attached")
        return self._urls[name]

    def stat(self, name: str) -> Stored | None:
        return self._assets(self.repository, self.tag).get(name)

    def read(self, name: str) -> bytes:
        return _http_get(self.url(name))

    def put(self, name: str, path: Path, sha256: str) -> None:
        if path.name != name:
            raise StorageError(f"{path}: a release asset is named after its file, and this one is not {name}")
        if self._exists is None:
            self._exists = self.gh.assets(self.repository, self.tag) is not None
        if not self._exists:
            self.gh.create(self.repository, self.tag)
            self._exists = True
        self._own = None  # the next stat lists again: a read-back is the storage's word after the upload
        self.gh.upload(self.repository, self.tag, path)

    def listing(self, stored_at: str) -> dict[str, Stored] | None:
        if not stored_at.startswith("github-release:"):
            return None
        repository, _, tag = stored_at.removeprefix("github-release:").rpartition("@")
        if repository != self.repository:
            return None
        return self._assets(repository, tag)


# -- S3-compatible bucket --------------------------------------------------------------------------------


class S3Storage:
    backend = "s3"

    def __init__(self, *, bucket: str, prefix: str, endpoint_url: str | None, region: str, public_url: str,
                 metadata: bool) -> None:
        try:
            import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError, ClientError
        except ImportError as exc:
            raise StorageError(f"s3 storage needs boto3 (requirements/storage-test.txt pins it): {exc}") from None
        self.bucket, self.prefix, self.public_url, self.serves_metadata = bucket, prefix, public_url, metadata
        self._client_error: type[ClientError] = ClientError
        self._boto_errors: tuple[type[Exception], ...] = (BotoCoreError, ClientError)
        self._client = boto3.client("s3", endpoint_url=endpoint_url, region_name=region,
                                    config=Config(retries={"max_attempts": 3}, connect_timeout=30, read_timeout=120))

    def where(self) -> str:
        return f"s3:{self.bucket}/{self.prefix}"

    def stored_at(self, name: str) -> str:
        return f"s3:{self.bucket}/{self.prefix}{name}"

    def url(self, name: str) -> str:
        return f"{self.public_url}{quote(self.prefix + name, safe='/')}"

    def _errors(self) -> tuple[type[Exception], ...]:
        return self._boto_errors

    def stat(self, name: str) -> Stored | None:
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=self.prefix + name, ChecksumMode="ENABLED")
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StorageError(f"{self.where()}{name}: {exc}") from None
        except self._errors() as exc:
            raise StorageError(f"{self.where()}{name}: {exc}") from None
        checksum = head.get("ChecksumSHA256")
        sha256 = None
        if checksum:
            try:
                raw = base64.b64decode(checksum, validate=True)
            except ValueError:
                raise StorageError(f"{self.where()}{name}: ChecksumSHA256 {checksum!r} is not base64") from None
            if len(raw) != 32 or "-" in checksum:
                raise StorageError(f"{self.where()}{name}: ChecksumSHA256 {checksum!r} is not one sha256")
            sha256 = raw.hex()
        return Stored(name, int(head["ContentLength"]), sha256)

    def read(self, name: str) -> bytes:
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"]
            return cast(bytes, body.read())
        except self._errors() as exc:
            raise StorageError(f"{self.where()}{name}: {exc}") from None

    def put(self, name: str, path: Path, sha256: str) -> None:
        checksum = base64.b64encode(bytes.fromhex(sha256)).decode("ascii")
        try:
            with path.open("rb") as body:
                # IfNoneMatch: the bucket itself refuses a key that exists (S3 conditional writes).
                self._client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=body,
                                        ChecksumAlgorithm="SHA256", ChecksumSHA256=checksum, IfNoneMatch="*")
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                # The key exists. An object with our digest is ours, whichever attempt stored it: boto3 retries
                # a PUT whose answer was lost, and the retry then meets the object the first attempt stored.
                found = self.stat(name)
                if found is not None and found.sha256 == sha256 and found.size == path.stat().st_size:
                    return
                raise IndexConflictError(f"{self.where()}{name}: the bucket already holds this name with other "
                                         f"bytes (sha256 {found.sha256 if found else 'gone'})") from None
            raise StorageError(f"{self.where()}{name}: upload failed: {exc}") from None
        except self._errors() as exc:
            raise StorageError(f"{self.where()}{name}: upload failed: {exc}") from None

    def claim(self, name: str, data: bytes) -> bytes | None:
        """Store ``data`` under ``name`` only if the name is free (a conditional PUT: the bucket decides between
        racing releases); None when stored, else what the name already holds (at most 4 KiB of it)."""
        key = self.prefix + name
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            return None
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise StorageError(f"{self.where()}{name}: claim failed: {exc}") from None
        except self._errors() as exc:
            raise StorageError(f"{self.where()}{name}: claim failed: {exc}") from None
        try:
            return cast(bytes, self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read(4096))
        except self._errors() as exc:
            raise StorageError(f"{self.where()}{name}: cannot read the claim: {exc}") from None

    def listing(self, stored_at: str) -> dict[str, Stored] | None:
        head = f"s3:{self.bucket}/{self.prefix}"
        if not stored_at.startswith(head):
            return None
        found: dict[str, Stored] = {}
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents", []):
                    name = item["Key"][len(self.prefix):]
                    found[name] = Stored(name, int(item["Size"]), None)
        except self._errors() as exc:
            raise StorageError(f"{self.where()}: listing failed: {exc}") from None
        return found


def _http_get(url: str) -> bytes:
    """A stored object read back over HTTP, bounded like every fetch (index/http_fetch.py)."""
    from .fetch import DEADLINE_S
    from .http_fetch import FetchFailure, http_get

    try:
        return http_get(url, max_bytes=1 << 34, deadline_s=DEADLINE_S, what="a stored object").body
    except FetchFailure as exc:
        error = StorageError(str(exc))
        error.exit_code = exc.exit_code
        raise error from None


# -- the protocol: upload before publish, never overwrite ------------------------------------------------


@dataclass(frozen=True)
class Upload:
    name: str  # the object's name in storage (a wheel, or a wheel's NAME.metadata)
    path: Path  # the staged copy (the bytes that were checked and audited)
    sha256: str
    size: int


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_back(storage: Storage, item: Upload, found: Stored | None) -> None:
    """The storage's own word on an object must be the bytes we mean to list: size, then sha256 (the one
    it reports, else the bytes read back and hashed)."""
    if found is None:
        raise IndexIntegrityError(f"{storage.where()}: {item.name} is missing right after its upload; not listed")
    if not found.complete:
        raise IndexIntegrityError(f"{storage.where()}: {item.name} is an upload that never finished; delete that "
                                  "asset (it was never listed) and run the release again")
    if found.size != item.size:
        raise IndexIntegrityError(f"{storage.where()}: {item.name} reads back as {found.size} bytes, uploaded "
                                  f"{item.size}; not listed")
    sha256 = found.sha256
    if sha256 is None:
        sha256 = hashlib.sha256(storage.read(item.name)).hexdigest()
    if sha256 != item.sha256:
        raise IndexIntegrityError(f"{storage.where()}: {item.name} reads back with sha256 {sha256}, uploaded "
                                  f"{item.sha256}; the storage does not hold what was uploaded: not listed")


def plan_uploads(storage: Storage, items: Iterable[Upload]) -> tuple[list[Upload], list[str]]:
    """Before anything is uploaded: which names are new, and which an earlier (interrupted) run already
    uploaded with the very bytes (adopted). A name the storage holds with other bytes is refused."""
    new, adopted, clashes = [], [], []
    for item in items:
        found = storage.stat(item.name)
        if found is None:
            new.append(item)
            continue
        try:
            _read_back(storage, item, found)
        except IndexIntegrityError:
            clashes.append(f"{item.name}: {storage.where()} already holds this name with other bytes "
                           f"({found.size} bytes, sha256 {found.sha256 or 'not reported'})")
            continue
        adopted.append(item.name)
    if clashes:
        raise IndexConflictError("refusing to publish: a stored wheel is never replaced (bump the version instead):"
                                 "\n  " + "\n  ".join(clashes))
    return new, adopted


def upload_all(storage: Storage, items: list[Upload], say: Callable[[str], None]) -> None:
    """Upload each object (never over an existing name), then read every digest back (after the last upload:
    one listing of a release answers them all); raise on the first lie. Nothing is listed before this returns."""
    for item in items:
        if _sha256_file(item.path) != item.sha256:  # the staged copy is what was checked
            raise IndexIntegrityError(f"{item.path}: the staged copy changed since it was checked")
        storage.put(item.name, item.path, item.sha256)
    for item in items:
        _read_back(storage, item, storage.stat(item.name))
        say(f"uploaded {item.name} to {storage.where()} (read back: sha256 {item.sha256[:16]}...)")


def check_listed(storage: Storage,
                 entries: Iterable[tuple[str, str, int, str, bool, str]]) -> tuple[int, int, list[str]]:
    """Every listed wheel that lives in this storage still exists there with its size (and the sha256 the
    storage reports, where its listing has one: release assets). Entries: (name, stored_at, size, sha256,
    metadata_beside, metadata_sha256). Returns (checked, not this storage's to check, places listed)."""
    listings: dict[str, dict[str, Stored] | None] = {}
    missing, altered = [], []
    checked = elsewhere = 0
    for name, stored_at, size, sha256, metadata_beside, meta_sha in entries:
        place = stored_at if stored_at.startswith("github-release:") else storage.where()
        if place not in listings:
            listings[place] = storage.listing(stored_at)
        listing = listings[place]
        if listing is None:
            elsewhere += 1
            continue
        checked += 1
        for obj, want_size, want_sha in ((name, size, sha256), (f"{name}.metadata", None, meta_sha)):
            if obj != name and not metadata_beside:
                continue
            found = listing.get(obj)
            if found is None or not found.complete:
                missing.append(f"{obj} ({stored_at})")
            elif want_size is not None and found.size != want_size:
                altered.append(f"{obj}: {found.size} bytes, listed with {want_size}")
            elif want_sha is not None and found.sha256 is not None and found.sha256 != want_sha:
                altered.append(f"{obj}: the storage reports sha256 {found.sha256}, listed with {want_sha}")
    if altered:
        raise IndexIntegrityError("listed wheels differ in storage from what kiln-index.json records; refusing "
                                  "to publish over them:\n  " + "\n  ".join(sorted(altered)))
    if missing:
        raise IndexIntegrityError("listed wheels are missing from their storage (a page links them); refusing to "
                                  "publish until they are restored:\n  " + "\n  ".join(sorted(missing)))
    return checked, elsewhere, sorted(p for p, listing in listings.items() if listing is not None)


__all__ = ["BACKENDS", "DEFAULT_CONFIG", "GhCli", "GitHubReleaseStorage", "S3Storage", "Storage", "StorageError",
           "Stored", "Upload", "check_config", "check_listed", "load_config", "open_storage", "plan_uploads",
           "upload_all"]
