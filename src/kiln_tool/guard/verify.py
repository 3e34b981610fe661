"""Check files against the latest signed release of an index: one line per file, what holds or what does not.

Shared by `kiln verify` (kiln_tool/commands/verify.py) and ``python -m <pkg>._kiln doctor --verify``; the
standard library alone (guard/signed.py says what a signed release is).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .signed import (
    LATEST,
    MAX_FILE_BYTES,
    Chain,
    Fetch,
    FileEntry,
    Identity,
    TooLarge,
    VerifyError,
    check_fresh,
    check_identity,
    http_fetcher,
    installed_content,
    read_chain,
    rolled_back_to,
    url_sha256,
)

OK, FAIL = "OK", "FAIL"
_METADATA_LIMIT = 8 << 20


@dataclass(frozen=True)
class Line:
    status: str  # OK | FAIL
    subject: str
    text: str

    def render(self) -> str:
        return f"{self.status:<4}  {self.subject}: {self.text}"


def _file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def check_served(chain: Chain, base_url: str, entry: FileEntry) -> Line:
    """One file of the index as it is served now, against the latest signed release."""
    release = chain.head.sequence
    url = entry.path if "://" in entry.path else base_url + quote(entry.path)
    limit = entry.size if entry.size else (_METADATA_LIMIT if entry.kind == "metadata" else MAX_FILE_BYTES)
    try:
        found = url_sha256(url, limit)
    except TooLarge:
        return Line(FAIL, entry.path, f"serves more than the {entry.size} bytes the signed release {release} gives "
                                      "(altered on the host)")
    except VerifyError as exc:
        return Line(FAIL, entry.path, f"{exc} (the signed release {release} gives sha256 {entry.sha256[:16]}...)")
    if found is None:
        return Line(FAIL, entry.path, f"missing (HTTP 404), though the signed release {release} lists it")
    sha256, _size = found
    if sha256 != entry.sha256:
        older = rolled_back_to(chain, entry.path, sha256)
        if older is not None:
            return Line(FAIL, entry.path, f"rolled back: these are the bytes of release {older}, not of the latest "
                                          f"signed release {release}")
        return Line(FAIL, entry.path, f"sha256 {sha256[:16]}... is not the {entry.sha256[:16]}... of the signed "
                                      f"release {release} (altered on the host)")
    return Line(OK, entry.path, f"sha256 matches the signed release {release}")


def check_wheel(chain: Chain, wheel: Path) -> Line:
    release = chain.head.sequence
    if not wheel.is_file():
        return Line(FAIL, str(wheel), "no such file")
    sha256, _size = _file_sha256(wheel)
    kind = "sdist" if wheel.name.endswith(".tar.gz") else "wheel"  # a downloaded sdist is checked as a wheel is
    listed = [e for e in chain.head.files.values() if e.kind == kind and e.filename == wheel.name]
    if not listed:
        same = [e for e in chain.head.files.values() if e.kind == kind and e.sha256 == sha256]
        if same:
            return Line(OK, wheel.name, f"sha256 is that of {same[0].filename} in the signed release {release}")
        return Line(FAIL, wheel.name, f"not in the signed release {release} (no {kind} of that name or sha256)")
    if listed[0].sha256 != sha256:
        return Line(FAIL, wheel.name, f"sha256 {sha256[:16]}... is not the {listed[0].sha256[:16]}... of the "
                                      f"signed release {release} (another file under its name)")
    return Line(OK, wheel.name, f"sha256 matches the signed release {release}")


def check_installed(chain: Chain, distribution: str) -> list[Line]:
    release = chain.head.sequence
    try:
        found = installed_content(distribution)
    except VerifyError as exc:
        return [Line(FAIL, distribution, str(exc))]
    subject = f"{found.name} {found.version} (installed)"
    lines = [Line(FAIL, f"{found.location}/{path}", "changed since it was installed (not the bytes its RECORD "
                                                     "lists)") for path in found.changed]
    match = [e for e in chain.head.files.values() if e.kind == "wheel" and e.content == found.content]
    if not match:
        lines.append(Line(FAIL, subject, f"its files are those of no wheel in the signed release {release}"
                                         + (" (files changed: above)" if found.changed else "")))
    else:
        lines.append(Line(OK, subject, f"its files are exactly those of {match[0].filename}, signed in release "
                                       f"{release}"))
    return lines


def verify(index_url: str, identity: Identity, *, wheels: Iterable[Path] = (), installed: Iterable[str] = (),
           whole_index: bool = False, state: Path | None = None, fetch: Fetch | None = None,
           verifier: Any = None) -> list[Line]:
    """Every line of the verdict; the first is the release chain's. Any FAIL line means: do not trust it."""
    base = index_url if index_url.endswith("/") else index_url + "/"
    wheels, installed = list(wheels), list(installed)
    try:
        check_identity(identity)
        chain = read_chain(fetch or http_fetcher(base), identity, verifier=verifier)
        if chain is None:
            raise VerifyError(f"{LATEST}: missing (HTTP 404): {base} publishes no signed release")
        note = check_fresh(chain, f"{base} {identity.describe()}", state)
    except VerifyError as exc:
        failed = [Line(FAIL, LATEST, str(exc).removeprefix(f"{LATEST}: "))]
        failed += [Line(FAIL, w.name, "not checked: no verified release") for w in wheels]
        failed += [Line(FAIL, d, "not checked: no verified release") for d in installed]
        return failed
    said = (f"release {chain.head.sequence} of {chain.head.project}, signed by {chain.signer}; its chain of "
            f"{len(chain.releases)} release(s) is intact" + (f" {note}" if note else ""))
    lines = [Line(OK, LATEST, said)]
    if whole_index:
        entries = sorted(chain.head.files.values(), key=lambda e: e.path)
        lines += [check_served(chain, base, entry) for entry in entries]
    lines += [check_wheel(chain, wheel) for wheel in wheels]
    for distribution in installed:
        lines += check_installed(chain, distribution)
    return lines


__all__ = ["FAIL", "OK", "Line", "check_installed", "check_served", "check_wheel", "verify"]
