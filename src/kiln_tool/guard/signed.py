"""Verifying a signed kiln release: the one checker, for `kiln verify` and `python -m <pkg>._kiln doctor --verify`.

Vendored into every package as ``<pkg>/_kiln/signed.py``, so it uses the standard library alone (plus
sigstore-python, imported only for a keyless bundle, and ``ssh-keygen`` for the key mode).

What a signed release is (written by kiln_tool.signing at `kiln release`):

- ``releases/release-NNNNNN.json``: the release manifest, canonical JSON (sorted keys, no spaces, one
  trailing newline): the project, its sequence number, the sha256 of the release before it (the chain), and
  every file the index serves (pages, kiln-index.json, every wheel and METADATA, wherever stored) with its
  sha256 and size; a wheel also with the digest of what it installs (``content``);
- beside it its signature: ``.sig`` (OpenSSH ``ssh-keygen -Y sign``, namespace ``kiln-release``) or
  ``.sigstore.json`` (a sigstore bundle, keyless through the workflow's OIDC identity);
- ``kiln-release.json``: a copy of the latest release manifest, the one file that changes.

No file is trusted because it is there: the latest manifest must carry a good signature from the expected
identity, every older one must hash to what its successor names (the signed latest one commits to the whole
chain, so a key rotated out of the allowed signers leaves older releases verifiable), and every file checked
must have the digest the latest manifest gives it. A missing signature is a failure.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

RELEASE_SCHEMA = 1
RELEASE_KIND = "kiln-release"
SSH_NAMESPACE = "kiln-release"
LATEST = "kiln-release.json"
RELEASES_DIR = "releases"
SSH_SUFFIX = ".sig"
SIGSTORE_SUFFIX = ".sigstore.json"
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
MAX_RELEASE_BYTES = 64 << 20
MAX_SIGNATURE_BYTES = 1 << 20
MAX_FILE_BYTES = 1 << 34
KINDS = ("page", "manifest", "wheel", "metadata", "sdist")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PATH = re.compile(r"(?:https?://[!-~]+|[A-Za-z0-9._+~%!-][A-Za-z0-9._+~%!/-]*)")
_PROJECT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_PRINCIPAL = re.compile(r"[A-Za-z0-9@._+-]+")
_DIST_INFO_FILES = ("METADATA", "WHEEL", "entry_points.txt", "top_level.txt")


class VerifyError(Exception):
    """A refusal: names the file and the reason, in one line."""


class TooLarge(VerifyError):
    """More bytes than the file may have (a signed size, or a format's bound)."""


def release_name(sequence: int) -> str:
    return f"{RELEASES_DIR}/release-{sequence:06d}.json"


def canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii") + b"\n"


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the index's base URL, or an absolute URL (a wheel in storage)
    kind: str
    sha256: str
    size: int
    content: str | None = None  # wheels: content_digest of what it installs

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"path": self.path, "kind": self.kind, "sha256": self.sha256, "size": self.size}
        if self.content is not None:
            doc["content"] = self.content
        return doc

    @property
    def filename(self) -> str:
        """The file's name (a stored wheel's URL names it percent-encoded: opkiln-0.1.0%2Bpt213cpu-...)."""
        return unquote(self.path.rsplit("/", 1)[-1])


@dataclass(frozen=True)
class Release:
    project: str
    sequence: int
    previous: str | None  # sha256 of the release manifest before it
    files: dict[str, FileEntry]
    raw: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def name(self) -> str:
        return release_name(self.sequence)


def release_document(project: str, sequence: int, previous: str | None, files: Iterable[FileEntry]) -> bytes:
    """The canonical bytes of a release manifest (what is signed)."""
    entries = sorted(files, key=lambda f: f.path)
    doc = {"schema": RELEASE_SCHEMA, "kind": RELEASE_KIND, "project": project, "sequence": sequence,
           "previous": previous, "files": [f.to_json() for f in entries]}
    raw = canonical(doc)
    parse_release(raw, "the new release manifest")  # what is written is what every reader accepts
    return raw


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        raise VerifyError("a key appears twice in one object")
    return doc


def parse_release(raw: bytes, where: str) -> Release:
    """A release manifest's bytes, held to the format exactly: canonical form, types, files in path order."""

    def bad(reason: str) -> VerifyError:
        return VerifyError(f"{where}: {reason}")

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique)
    except VerifyError as exc:
        raise bad(str(exc)) from None
    except (ValueError, RecursionError):
        raise bad("not a JSON document (truncated or altered)") from None
    if not isinstance(doc, dict) or doc.get("kind") != RELEASE_KIND or doc.get("schema") != RELEASE_SCHEMA:
        raise bad(f"not a kiln release manifest of schema {RELEASE_SCHEMA}")
    fields = {"schema", "kind", "project", "sequence", "previous", "files"}
    if set(doc) != fields:
        raise bad(f"unexpected or missing fields {sorted(set(doc) ^ fields)}")
    project, sequence, previous, files = doc["project"], doc["sequence"], doc["previous"], doc["files"]
    if not isinstance(project, str) or not _PROJECT.fullmatch(project):
        raise bad("malformed project")
    if not isinstance(sequence, int) or isinstance(sequence, bool) or not 1 <= sequence < 10**6:
        raise bad("malformed sequence")
    if previous is not None and not (isinstance(previous, str) and _SHA256.fullmatch(previous)):
        raise bad("malformed previous (the sha256 of the release before)")
    if (previous is None) != (sequence == 1):
        raise bad(f"release {sequence} {'names no' if previous is None else 'names a'} release before it")
    if not isinstance(files, list):
        raise bad("files is not a list")
    entries: dict[str, FileEntry] = {}
    last = ""
    for item in files:
        if not isinstance(item, dict) or not {"path", "kind", "sha256", "size"} <= set(item) or \
                not set(item) <= {"path", "kind", "sha256", "size", "content"}:
            raise bad("a malformed file entry")
        path, kind, sha256, size = item["path"], item["kind"], item["sha256"], item["size"]
        content = item.get("content")
        if not isinstance(path, str) or not _PATH.fullmatch(path) or "/../" in f"/{path}/" or "//" in \
                path.split("://", 1)[-1]:
            raise bad(f"malformed path {str(path)[:100]!r}")
        if path <= last:
            raise bad(f"files out of order at {path[:100]!r} (reordered, or listed twice)")
        last = path
        if kind not in KINDS or not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise bad(f"{path[:100]}: malformed kind or sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(f"{path[:100]}: malformed size")
        if content is not None and (kind != "wheel" or not isinstance(content, str) or not _SHA256.fullmatch(content)):
            raise bad(f"{path[:100]}: malformed content digest")
        entries[path] = FileEntry(path, kind, sha256, size, content)
    if raw != canonical(doc):
        raise bad("not in canonical form (reordered or altered after signing)")
    return Release(project, sequence, previous, entries, raw)


# -- what a wheel installs -------------------------------------------------------------------------------


def _content_digest(pairs: Iterable[tuple[str, str]]) -> str:
    listing = "".join(f"{path}\t{sha256}\n" for path, sha256 in sorted(pairs))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def _signed_dist_info(rest: str) -> bool:
    """Which files of a .dist-info folder the content digest covers: what a wheel brings (METADATA, WHEEL, entry
    points, licenses, SBOMs), never what an installer writes there (INSTALLER, REQUESTED, direct_url.json, RECORD,
    a tool's own such as uv_cache.json), on both sides alike."""
    return rest in _DIST_INFO_FILES or rest.startswith(("licenses/", "sboms/"))


def _installed_path(member: str) -> str | None:
    """Where a wheel member lands relative to site-packages; None for RECORD and what lands elsewhere."""
    head, _, rest = member.partition("/")
    if head.endswith(".dist-info") and not _signed_dist_info(rest):
        return None
    if head.endswith(".data"):
        sub, _, inner = rest.partition("/")
        return inner if sub in ("purelib", "platlib") and inner else None
    return member


def wheel_content_digest(wheel: Path) -> str:
    """The digest of what a wheel installs into site-packages: every file's path and sha256 (RECORD excluded)."""
    pairs = []
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            path = _installed_path(info.filename)
            if path is None:
                continue
            digest = hashlib.sha256()
            with archive.open(info) as member:
                for chunk in iter(lambda: member.read(1 << 20), b""):
                    digest.update(chunk)
            pairs.append((path, digest.hexdigest()))
    return _content_digest(pairs)


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    location: str
    content: str  # content digest of the files on disk
    changed: tuple[str, ...]  # files whose bytes differ from the installed RECORD


def installed_content(distribution: str, path: list[str] | None = None) -> Installed:
    """The content digest of an installed distribution, from the bytes on disk of every file its RECORD lists
    (what the installer adds is left out: bytecode and its own .dist-info files; so are files outside
    site-packages such as scripts, as the wheel side leaves them out). ``path``: where to look (default
    sys.path)."""
    import base64
    from importlib import metadata

    found = list(metadata.distributions(name=distribution, path=path)) if path is not None else None
    try:
        dist = metadata.distribution(distribution) if found is None else found[0]
    except (metadata.PackageNotFoundError, IndexError):
        raise VerifyError(f"{distribution}: not installed in this environment") from None
    files = dist.files
    if files is None:
        raise VerifyError(f"{distribution}: installed without a RECORD; cannot tell which files are its own")
    pairs, changed = [], []
    location = str(Path(str(dist.locate_file(""))).resolve())
    for entry in files:
        posix = entry.as_posix()
        head, _, rest = posix.partition("/")
        if posix.startswith(("../", "/")) or posix.endswith(".pyc") or \
                (head.endswith(".dist-info") and not _signed_dist_info(rest)):
            continue
        on_disk = Path(str(entry.locate()))
        try:
            data = on_disk.read_bytes()
        except OSError as exc:
            raise VerifyError(f"{posix}: listed in {distribution}'s RECORD, unreadable ({exc.strerror})") from None
        sha256 = hashlib.sha256(data).hexdigest()
        if entry.hash is not None and entry.hash.mode == "sha256":
            recorded = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
            if recorded != sha256:
                changed.append(posix)
        pairs.append((posix, sha256))
    return Installed(dist.metadata["Name"], dist.version, location, _content_digest(pairs), tuple(changed))


# -- fetching (bounded) ----------------------------------------------------------------------------------


Fetch = Callable[[str, int], "bytes | None"]
"""(path relative to the index, byte limit) -> the bytes, or None for HTTP 404."""


DEADLINE_S = 600.0  # one file, whole: a server dripping bytes is cut off, not waited for


def get_url(url: str, limit: int, timeout: float = 60.0, sink: Any = None,
          deadline_s: float | None = None) -> bytes | None:
    """GET with a byte limit (Content-Length and every byte read), a deadline for the whole fetch, and at most
    five redirects, each to http(s). None for HTTP 404; VerifyError naming the URL otherwise."""
    import time

    started = time.monotonic()
    end = started + (DEADLINE_S if deadline_s is None else deadline_s)
    parts = urlsplit(url)
    for _redirect in range(6):
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise VerifyError(f"{url[:200]}: not an http(s) URL")
        conn_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_type(parts.hostname, parts.port, timeout=max(0.1, min(timeout, end - time.monotonic())))
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        try:
            conn.request("GET", target, headers={"Cache-Control": "no-cache", "User-Agent": "kiln-verify"})
            answer = conn.getresponse()
            if answer.status in (301, 302, 303, 307, 308) and answer.getheader("Location"):
                url = urljoin(url, answer.getheader("Location") or "")
                parts = urlsplit(url)
                continue
            if answer.status == 404:
                return None
            if answer.status != 200:
                raise VerifyError(f"{url[:200]}: HTTP {answer.status}")
            length = answer.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) > limit:
                raise TooLarge(f"{url[:200]}: {length} bytes, more than the {limit} this file may have")
            body = bytearray()
            read = 0
            while chunk := answer.read1(1 << 16):
                if time.monotonic() > end:
                    raise VerifyError(f"{url[:200]}: not served within {end - started:.0f} s (cut off)")
                read += len(chunk)
                if read > limit:
                    raise TooLarge(f"{url[:200]}: more than the {limit} bytes this file may have")
                if sink is not None:
                    sink(chunk)
                else:
                    body += chunk
            if length is not None and length.isdigit() and read != int(length):
                raise VerifyError(f"{url[:200]}: truncated ({read} of {length} bytes)")
            return bytes(body)
        except (OSError, http.client.HTTPException) as exc:
            raise VerifyError(f"{url[:200]}: cannot fetch ({' '.join(str(exc).split())[:200]})") from None
        finally:
            conn.close()
    raise VerifyError(f"{url[:200]}: too many redirects")


def http_fetcher(base_url: str) -> Fetch:
    base = base_url if base_url.endswith("/") else base_url + "/"
    return lambda path, limit: get_url(path if "://" in path else base + quote(path), limit)


def dir_fetcher(root: Path) -> Fetch:
    def fetch(path: str, limit: int) -> bytes | None:
        if "://" in path:
            return get_url(path, limit)
        target = root / path
        if not target.is_file():
            return None
        if target.stat().st_size > limit:
            raise TooLarge(f"{path}: more than the {limit} bytes this file may have")
        return target.read_bytes()
    return fetch


def url_sha256(url: str, limit: int) -> tuple[str, int] | None:
    """sha256 and size of what a URL serves, streamed (wheels are not held in memory); None for HTTP 404."""
    digest = hashlib.sha256()
    size = [0]

    def sink(chunk: bytes) -> None:
        digest.update(chunk)
        size[0] += len(chunk)

    return None if get_url(url, limit, sink=sink) is None else (digest.hexdigest(), size[0])


# -- identities and signatures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SshIdentity:
    """Key mode: who may sign, as an OpenSSH allowed-signers file and the principal expected in it."""

    allowed_signers: Path
    principal: str

    def describe(self) -> str:
        return f"{self.principal} (allowed signers {self.allowed_signers})"


@dataclass(frozen=True)
class GitHubIdentity:
    """Keyless: the repository whose workflow may sign (and, if given, that workflow's path)."""

    repository: str
    workflow: str | None = None  # e.g. .github/workflows/release.yml

    def describe(self) -> str:
        return f"{self.repository}" + (f" {self.workflow}" if self.workflow else "") + " (GitHub Actions, keyless)"


Identity = SshIdentity | GitHubIdentity


def check_identity(identity: Identity) -> Identity:
    if isinstance(identity, SshIdentity):
        if not _PRINCIPAL.fullmatch(identity.principal):
            raise VerifyError(f"--identity {identity.principal[:100]!r}: not a principal (letters, digits, @._+-)")
        if not identity.allowed_signers.is_file():
            raise VerifyError(f"--allowed-signers {identity.allowed_signers}: no such file")
    else:
        if not _REPOSITORY.fullmatch(identity.repository):
            raise VerifyError(f"--repository {identity.repository[:100]!r}: not OWNER/NAME")
        if identity.workflow is not None and not re.fullmatch(r"\.github/workflows/[A-Za-z0-9_.-]+\.ya?ml",
                                                               identity.workflow):
            raise VerifyError(f"--workflow {identity.workflow[:100]!r}: not .github/workflows/NAME.yml")
    return identity


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise VerifyError("ssh-keygen is not on PATH (OpenSSH's client; it checks key-mode signatures)")
    return found


def verify_ssh(raw: bytes, signature: bytes, identity: SshIdentity, where: str) -> str:
    with tempfile.TemporaryDirectory(prefix="kiln-verify-") as tmp:
        sig = Path(tmp, "release.sig")
        sig.write_bytes(signature)
        done = subprocess.run([_ssh_keygen(), "-Y", "verify", "-f", str(identity.allowed_signers), "-I",
                               identity.principal, "-n", SSH_NAMESPACE, "-s", str(sig)], input=raw,
                              capture_output=True, timeout=60, check=False)
    if done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout).decode("utf-8", "replace").split())[:200]
        raise VerifyError(f"{where}{SSH_SUFFIX}: not a good signature by {identity.principal} under "
                          f"{identity.allowed_signers} ({detail or 'ssh-keygen refused it'})")
    said = done.stdout.decode("utf-8", "replace").strip()
    key = said.rsplit(" ", 1)[-1] if said else "?"
    return f"{identity.principal} (key {key})"


def github_policy(identity: GitHubIdentity) -> Any:
    """The sigstore verification policy for a GitHub Actions identity: GitHub's OIDC issuer, the caller's
    repository, and (if given) the workflow that ran; the certificate's SAN names the reusable workflow."""
    try:
        from sigstore.verify import policy
    except ImportError:
        raise VerifyError("checking a keyless signature needs sigstore-python (pip install 'sigstore>=4.5,<5', "
                          "which torch-kiln[signing] brings)") from None
    checks: list[Any] = [policy.OIDCIssuerV2(GITHUB_ISSUER),
                         policy.OIDCSourceRepositoryURI(f"https://github.com/{identity.repository}")]
    if identity.workflow is not None:
        checks.append(_WorkflowPolicy(identity))
    return policy.AllOf(checks)


class _WorkflowPolicy:
    """The Build Config URI (the caller's workflow file, OID 1.3.6.1.4.1.57264.1.18) names REPO/WORKFLOW@ref."""

    OID = "1.3.6.1.4.1.57264.1.18"

    def __init__(self, identity: GitHubIdentity) -> None:
        self.prefix = f"https://github.com/{identity.repository}/{identity.workflow}@"

    def verify(self, cert: Any) -> None:
        try:
            from cryptography.x509 import ObjectIdentifier
            from sigstore.errors import VerificationError
        except ImportError:  # sigstore (which brings cryptography) was imported to get here
            raise
        try:
            ext = cert.extensions.get_extension_for_oid(ObjectIdentifier(self.OID)).value.value
        except Exception:
            raise VerificationError("the certificate names no workflow (Build Config URI)") from None
        value = _der_utf8(ext)
        if not value.startswith(self.prefix):
            raise VerificationError(f"signed by workflow {value[:200]!r}, expected {self.prefix}<ref>")


def _der_utf8(raw: bytes) -> str:
    """A DER UTF8String's text (the Fulcio V2 extensions are encoded so)."""
    if len(raw) >= 2 and raw[0] == 0x0C:
        length, start = raw[1], 2
        if length & 0x80:
            count = length & 0x7F
            length, start = int.from_bytes(raw[2:2 + count], "big"), 2 + count
        return raw[start:start + length].decode("utf-8", "replace")
    return raw.decode("utf-8", "replace")


_VERIFIERS: dict[str, Any] = {}


def _production_verifier(verifier_type: Any) -> Any:
    """One Verifier per process (its trust root is refreshed once, not once per release of the chain)."""
    if "production" not in _VERIFIERS:
        _VERIFIERS["production"] = verifier_type.production()
    return _VERIFIERS["production"]


def verify_sigstore(raw: bytes, bundle: bytes, identity: GitHubIdentity, where: str,
                    verifier: Any = None) -> str:
    try:
        from sigstore.models import Bundle
        from sigstore.verify import Verifier
    except ImportError:
        raise VerifyError(f"{where}{SIGSTORE_SUFFIX}: checking a keyless signature needs sigstore-python "
                          "(pip install 'sigstore>=4.5,<5', which torch-kiln[signing] brings)") from None
    try:
        parsed = Bundle.from_json(bundle)
    except Exception as exc:
        raise VerifyError(f"{where}{SIGSTORE_SUFFIX}: not a sigstore bundle ({' '.join(str(exc).split())[:200]})"
                          ) from None
    try:
        (verifier or _production_verifier(Verifier)).verify_artifact(raw, parsed, github_policy(identity))
    except Exception as exc:
        raise VerifyError(f"{where}{SIGSTORE_SUFFIX}: not a good signature by {identity.describe()} "
                          f"({' '.join(str(exc).split())[:200]})") from None
    return identity.describe()


def verify_signature(raw: bytes, where: str, fetch: Fetch, identity: Identity, verifier: Any = None) -> str:
    """Who signed ``raw`` (the release manifest at ``where``), or VerifyError: no signature is never a pass."""
    if isinstance(identity, SshIdentity):
        signature = fetch(where + SSH_SUFFIX, MAX_SIGNATURE_BYTES)
        if signature is None:
            raise VerifyError(f"{where}{SSH_SUFFIX}: missing: an unsigned release is never accepted")
        return verify_ssh(raw, signature, identity, where)
    bundle = fetch(where + SIGSTORE_SUFFIX, MAX_SIGNATURE_BYTES)
    if bundle is None:
        raise VerifyError(f"{where}{SIGSTORE_SUFFIX}: missing: an unsigned release is never accepted")
    return verify_sigstore(raw, bundle, identity, where, verifier)


# -- the chain ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chain:
    head: Release
    releases: tuple[Release, ...]  # newest first, back to release 1
    signer: str


def read_chain(fetch: Fetch, identity: Identity | None, project: str | None = None,
               verifier: Any = None) -> Chain | None:
    """The latest signed release and every one before it, each checked; None when the index has no
    kiln-release.json. ``identity`` None: the hashes of the chain only (a release extending it).
    ``verifier``: the sigstore Verifier (default: the public instance's, trust root updated online)."""
    latest = fetch(LATEST, MAX_RELEASE_BYTES)
    if latest is None:
        return None
    head = parse_release(latest, LATEST)
    if project is not None and head.project != project:
        raise VerifyError(f"{LATEST}: a release of {head.project}, not of {project}")
    stored = fetch(head.name, MAX_RELEASE_BYTES)
    if stored is None:
        raise VerifyError(f"{head.name}: missing (HTTP 404), though {LATEST} names release {head.sequence}")
    if stored != latest:
        raise VerifyError(f"{LATEST}: not the bytes of {head.name} (a copy altered or rolled back)")
    signer = verify_signature(latest, head.name, fetch, identity, verifier) if identity is not None else "(not checked)"
    releases = [head]
    current = head
    while current.previous is not None:
        name = release_name(current.sequence - 1)
        raw = fetch(name, MAX_RELEASE_BYTES)
        if raw is None:
            raise VerifyError(f"{name}: missing (HTTP 404): the chain from release {current.sequence} is broken")
        if hashlib.sha256(raw).hexdigest() != current.previous:
            raise VerifyError(f"{current.name}: its chain skips or replaces release {current.sequence - 1} (it names "
                              f"sha256 {current.previous[:16]}..., {name} has "
                              f"{hashlib.sha256(raw).hexdigest()[:16]}...)")
        before = parse_release(raw, name)
        if before.sequence != current.sequence - 1 or before.project != head.project:
            raise VerifyError(f"{name}: holds release {before.sequence} of {before.project}, not "
                              f"{current.sequence - 1} of {head.project}")
        releases.append(before)
        current = before
    return Chain(head, tuple(releases), signer)


def rolled_back_to(chain: Chain, path: str, sha256: str) -> int | None:
    """The older release in which ``path`` had these bytes, if any (a rollback of that file)."""
    for release in chain.releases[1:]:
        entry = release.files.get(path)
        if entry is not None and entry.sha256 == sha256:
            return release.sequence
    return None


# -- what was seen before: a whole index rolled back ------------------------------------------------------


def state_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kiln" / "verified.json"


def check_fresh(chain: Chain, key: str, state: Path | None) -> str | None:
    """Compare with the newest release verified before for ``key`` (index URL + identity); record this one.
    A lower sequence (the whole index rolled back) or another release under a seen number (a fork) is a
    VerifyError. Returns a note, or None."""
    if state is None:
        return None
    try:
        seen = json.loads(state.read_text(encoding="utf-8")) if state.is_file() else {}
    except (OSError, ValueError):
        seen = {}
    if not isinstance(seen, dict):
        seen = {}
    before = seen.get(key)
    if isinstance(before, dict) and isinstance(before.get("sequence"), int) and isinstance(before.get("sha256"), str):
        if before["sequence"] > chain.head.sequence:
            raise VerifyError(f"{LATEST}: release {chain.head.sequence} is older than release {before['sequence']}, "
                              f"verified here before (the index was rolled back; state {state})")
        match = [r for r in chain.releases if r.sequence == before["sequence"]]
        if match and match[0].sha256 != before["sha256"]:
            raise VerifyError(f"{release_name(before['sequence'])}: not the release {before['sequence']} verified "
                              f"here before (the chain was rewritten; state {state})")
    seen[key] = {"sequence": chain.head.sequence, "sha256": chain.head.sha256}
    try:
        state.parent.mkdir(parents=True, exist_ok=True)
        tmp = state.with_name(f".{state.name}.{os.getpid()}")
        tmp.write_text(json.dumps(seen, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(state)
    except OSError as exc:
        return f"(could not record this release in {state}: {exc.strerror})"
    return None


__all__ = ["Chain", "FileEntry", "GitHubIdentity", "Installed", "Release", "SshIdentity", "VerifyError",
           "canonical", "check_fresh", "check_identity", "dir_fetcher", "get_url", "http_fetcher", "installed_content",
           "parse_release", "read_chain", "release_document", "release_name", "rolled_back_to", "url_sha256",
           "verify_signature", "wheel_content_digest"]
