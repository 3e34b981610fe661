"""The index's own record of what it has published: OUT/kiln-index.json.

Every run reads it, adds the new wheels and writes it back; pages are rendered
from it alone, so a merge never depends on parsing our own HTML. Entries are
only ever added: a published wheel keeps its name, bytes and combinations.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from .. import kiln_wheel
from .combos import Combination
from .errors import IndexInputError
from .identity import Identities
from .sdists import PublishedSdist, version_key
from .wheels import WheelInfo

MANIFEST_NAME = "kiln-index.json"
PENDING_MARKER = ".kiln-merge-pending"  # the journal of a merge into OUT that was cut short (index/publish.py)
MANIFEST_SCHEMA = 1
SCHEMA_FILE = "kiln-index.schema.json"


def _sorted_combos(pairs: tuple[tuple[str, str], ...]) -> tuple[Combination, ...]:
    return tuple(sorted({Combination(torch, cuda) for torch, cuda in pairs}, key=lambda c: c.sort_key))


_combos = functools.cache(_sorted_combos)  # wrapped, not decorated: mutation testing mutates the function


@dataclass(frozen=True)
class PublishedWheel:
    filename: str
    project: str
    version: str
    sha256: str
    size: int
    metadata_sha256: str
    requires_python: str | None
    torch_requirement: str | None
    abi_mode: str
    cuda_tag: str
    torch_major_minor: str
    python_tag: str
    platforms: tuple[str, ...]
    combos: tuple[Combination, ...]
    # Where the wheel lives. None: in the site folder (wheels/NAME, linked relatively, METADATA beside it).
    # Otherwise its absolute URL in append-only storage, the storage's own name for it (index/storage.py:
    # "github-release:OWNER/REPO@TAG", "s3:BUCKET/KEY") and whether NAME.metadata (PEP 658) sits beside it.
    url: str | None = None
    stored_at: str | None = None
    metadata_beside: bool = True

    @classmethod
    def from_wheel(cls, wheel: WheelInfo, combos: frozenset[Combination], url: str | None = None,
                   stored_at: str | None = None, metadata_beside: bool = True) -> PublishedWheel:
        return cls(
            filename=wheel.filename, project=wheel.project, version=wheel.version, sha256=wheel.sha256,
            size=wheel.size, metadata_sha256=wheel.metadata_sha256, requires_python=wheel.requires_python,
            torch_requirement=wheel.torch_requirement, abi_mode=wheel.abi_mode, cuda_tag=wheel.cuda_tag,
            torch_major_minor=wheel.torch_major_minor, python_tag=wheel.python_tag, platforms=wheel.platforms,
            combos=tuple(sorted(combos, key=lambda c: c.sort_key)),
            url=url, stored_at=stored_at, metadata_beside=metadata_beside,
        )

    def with_combos(self, combos: frozenset[Combination]) -> PublishedWheel:
        if combos <= set(self.combos):
            return self
        merged = set(self.combos) | combos
        return replace(self, combos=tuple(sorted(merged, key=lambda c: c.sort_key)))

    def to_json(self) -> dict[str, Any]:
        stored = {} if self.url is None else {"url": self.url, "stored_at": self.stored_at,
                                              "metadata_beside": self.metadata_beside}
        return {**stored,
            "filename": self.filename, "project": self.project, "version": self.version, "sha256": self.sha256,
            "size": self.size, "metadata_sha256": self.metadata_sha256, "requires_python": self.requires_python,
            "torch_requirement": self.torch_requirement, "abi_mode": self.abi_mode, "cuda_tag": self.cuda_tag,
            "torch_major_minor": self.torch_major_minor, "python_tag": self.python_tag,
            "platforms": list(self.platforms), "combos": [{"torch": c.torch, "cuda": c.cuda} for c in self.combos],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str, served: tuple[str, str] | None = None) -> PublishedWheel:
        """An entry that passed the schema; its meaning is checked here (IndexInputError when wrong), by the
        very rules a new wheel is held to (kiln_tool.kiln_wheel): what kiln writes, it reads back. ``served``:
        (project, package) of the site, when the caller has it (default: the project kiln serves)."""
        filename = data["filename"]

        def bad(reason: str) -> IndexInputError:
            return IndexInputError(f"{where}: malformed entry for {filename!r}: {reason}")

        try:
            name = kiln_wheel.check_name(filename, *(served or (None, None)))
            if data["requires_python"] is not None:
                kiln_wheel.check_requires_python(data["requires_python"])
            if data["torch_requirement"] is None:
                raise kiln_wheel.NotAKilnWheel("no torch_requirement (every kiln wheel pins torch)")
            kiln_wheel.check_torch_requirement(data["torch_requirement"])
            kiln_wheel.check_fields(name, data["abi_mode"], data["cuda_tag"], data["torch_major_minor"],
                                    data["torch_requirement"])
        except kiln_wheel.NotAKilnWheel as exc:
            raise bad(str(exc)) from None
        if data["project"] != name.project:
            raise bad(f"project {data['project']!r} is not the file name's {name.project!r}")
        if data["version"] != name.version:
            raise bad(f"version {data['version']!r} is not the file name's {name.version!r}")
        if sorted(data["platforms"]) != list(name.platforms):
            raise bad(f"platforms {data['platforms']} are not the file name's {list(name.platforms)}")
        if data["python_tag"] != name.python_tag:
            raise bad(f"python_tag {data['python_tag']!r} is not the file name's {name.python_tag!r}")
        url, stored_at, metadata_beside = data.get("url"), data.get("stored_at"), data.get("metadata_beside", True)
        if (url is None) != (stored_at is None) or (url is None and "metadata_beside" in data):
            raise bad("url, stored_at and metadata_beside come together (a wheel in storage) or not at all "
                      "(a wheel in the site folder)")
        if url is not None:
            try:
                _check_url_base(url.rsplit("/", 1)[0] + "/")  # one storage, one base: checked once
            except IndexInputError as exc:
                raise bad(f"url: {exc}") from None
            if unquote(url.rsplit("/", 1)[1]) != filename:
                raise bad(f"url {url[:200]!r} does not end in the wheel's file name")
        combos = _combos(tuple((c["torch"], c["cuda"]) for c in data["combos"]))
        own = Combination(data["torch_major_minor"], data["cuda_tag"])
        if own not in combos or any(c.cuda != own.cuda for c in combos) or \
                (data["abi_mode"] == "torch" and len(combos) != 1):
            raise bad(f"combos {[c.page for c in combos]} are not those of a {data['abi_mode']} wheel for torch "
                      f"{own.torch} ({own.cuda})")
        return cls(
            filename=filename, project=data["project"], version=data["version"],
            sha256=data["sha256"], size=data["size"], metadata_sha256=data["metadata_sha256"],
            requires_python=data["requires_python"], torch_requirement=data["torch_requirement"],
            abi_mode=data["abi_mode"], cuda_tag=data["cuda_tag"],
            torch_major_minor=data["torch_major_minor"], python_tag=data["python_tag"],
            platforms=name.platforms, combos=combos, url=url, stored_at=stored_at,
            metadata_beside=bool(metadata_beside),
        )


_BASE_URL = re.compile(r"https?://[A-Za-z0-9._~:/\[\]!&()*+,;=%-]+/")
MAX_BASE_URL = 500


def check_base_url(url: str) -> str:
    """``--base-url`` as it is stored: the same rules when given on the command line and when read back."""
    if len(url) > MAX_BASE_URL:
        raise IndexInputError(f"--base-url: longer than {MAX_BASE_URL} characters")
    shown = url[:100]
    try:
        parts = urlsplit(url)
        _port = parts.port
    except ValueError as exc:
        raise IndexInputError(f"--base-url {shown!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise IndexInputError(f"--base-url {shown!r}: not an http(s) URL with a host")
    if "@" in parts.netloc:
        raise IndexInputError(f"--base-url {shown!r}: carries credentials, which the landing page would publish")
    if not _BASE_URL.fullmatch(url):  # its characters leave out "?", "#", quotes, spaces and "@"
        raise IndexInputError(f"--base-url {shown!r}: must be a plain http(s) URL ending in '/' (ASCII letters, "
                              "digits and URL punctuation; no query, fragment, quotes, spaces or credentials)")
    return url


@functools.lru_cache(maxsize=1024)
def _check_url_base(url: str) -> str:
    return check_base_url(url)


@dataclass
class Manifest:
    base_url: str | None
    wheels: dict[str, PublishedWheel]
    sdists: dict[str, PublishedSdist] = field(default_factory=dict)
    """The source fallback (index/sdists.py): at most one per version; the key is absent while there are none."""

    def to_json(self) -> str:
        """One wheel a line: readable, diffable, and fast to write (json's C encoder needs no indent)."""
        head: dict[str, Any] = {"schema": MANIFEST_SCHEMA, "generator": "kiln index", "base_url": self.base_url}
        if self.sdists:
            head["sdists"] = [self.sdists[name].to_json() for name in sorted(self.sdists)]
        lines = [json.dumps(head, sort_keys=True)[:-1] + ', "wheels": [']
        entries = [json.dumps(self.wheels[name].to_json(), sort_keys=True) for name in sorted(self.wheels)]
        lines.append(",\n".join(entries))
        lines.append("]}")
        return "\n".join(lines) + "\n"


@functools.cache
def _validator() -> Callable[[Any], Any]:
    """kiln-index.schema.json compiled to Python (fastjsonschema): 10,000 entries in a fraction of a
    second, where a generic validator takes seconds. Tests hold it to jsonschema's verdicts."""
    import fastjsonschema

    schema = json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))
    return cast(Callable[[Any], Any], fastjsonschema.compile(schema))


def schema_problem(doc: Any) -> str | None:
    """The first way ``doc`` breaks kiln-index.schema.json, in one line; None when it does not."""
    import fastjsonschema

    try:
        _validator()(doc)
    except fastjsonschema.JsonSchemaValueException as exc:
        path = [p for p in (exc.path or [])][1:]  # the first item is "data"
        entry = ""
        if len(path) >= 2 and path[0] == "wheels" and str(path[1]).isdigit():
            item = doc["wheels"][int(path[1])]
            filename = item.get("filename") if isinstance(item, dict) else None
            entry = f"malformed entry for {str(filename)[:100]!r}: "
        message = " ".join(str(exc.message).split())
        if len(message) > 200:
            message = message[:197] + "..."
        return f"{entry}{message}"
    return None


def load_manifest(out: Path) -> Manifest | None:
    """The manifest of an existing index at ``out``; None when ``out`` is absent or empty.

    The file is untrusted input: schema first (types, patterns), then meaning (normal forms,
    agreement with each file name, no two names for one distribution). Any problem is an
    IndexInputError (exit 2) naming the first one; nothing is written.
    """
    if not out.exists():
        return None
    if not out.is_dir():
        raise IndexInputError(f"{out} exists and is not a directory")
    path = out / MANIFEST_NAME
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise IndexInputError(f"{path}: not a regular file; refusing to merge")
    if not path.is_file():
        # A first merge into an existing folder (a mount point) cut short before its manifest landed: kiln's
        # own journal is there, and the run that reads it (index/publish.py _roll_forward) finishes the merge.
        if any(out.iterdir()) and not os.path.lexists(out / PENDING_MARKER):
            raise IndexInputError(
                f"{out} is not empty and has no {MANIFEST_NAME}: not an index written by kiln; "
                "refusing to merge into it (choose an empty or new output directory)"
            )
        return None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IndexInputError(f"{path}: unreadable ({exc.strerror}); refusing to merge") from None
    return parse_manifest(raw, str(path))


class _DuplicateKeyError(ValueError):
    pass


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return doc


_LAST_READ: dict[str, Manifest] = {}  # sha256 of the bytes -> what they read as (the last one only)


def parse_manifest(raw: bytes, where: str) -> Manifest:
    """A manifest's bytes, checked: the one reader, for what is on disk and for what a run is about to write.

    A release reads the fetched bytes at fetch time and again from SITE: the same bytes (by sha256) are read
    once, and each caller gets its own Manifest (the entries are immutable)."""
    digest = hashlib.sha256(raw).hexdigest()
    known = _LAST_READ.get(digest)
    if known is None:
        known = _parse_manifest(raw, where)
        _LAST_READ.clear()
        _LAST_READ[digest] = known
    return Manifest(base_url=known.base_url, wheels=dict(known.wheels), sdists=dict(known.sdists))


def _parse_manifest(raw: bytes, where: str) -> Manifest:
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
    except _DuplicateKeyError as exc:
        raise IndexInputError(f"{where}: the key {str(exc)[:100]!r} appears twice in one object (readers disagree "
                              "on which one counts); refusing to merge") from None
    except RecursionError:
        raise IndexInputError(f"{where}: nested too deeply to be a kiln index manifest; refusing to merge") from None
    except ValueError as exc:  # also UnicodeDecodeError, and an integer of more digits than Python reads
        detail = " ".join(str(exc).split())[:200]
        raise IndexInputError(f"{where}: unreadable ({detail}); refusing to merge") from None
    if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA:
        raise IndexInputError(f"{where}: not a kiln index manifest of schema {MANIFEST_SCHEMA}; refusing to merge")
    problem = schema_problem(doc)
    if problem:
        raise IndexInputError(f"{where}: {problem}; refusing to merge")
    if doc["base_url"] is not None:
        try:
            check_base_url(doc["base_url"])
        except IndexInputError as exc:
            raise IndexInputError(f"{where}: base_url: {exc}; refusing to merge") from None
    wheels: dict[str, PublishedWheel] = {}
    identities = Identities()
    served = kiln_wheel.served()  # once: thousands of entries, one project
    for entry in doc["wheels"]:
        wheel = PublishedWheel.from_json(entry, where, served)
        if wheel.filename in wheels:
            raise IndexInputError(f"{where}: {wheel.filename} listed twice")
        twin = identities.equivalent(wheel.filename)
        if twin is not None:
            raise IndexInputError(f"{where}: {wheel.filename} and {twin} name one distribution; refusing to merge")
        identities.add(wheel.filename, wheel.sha256)
        wheels[wheel.filename] = wheel
    sdists = read_sdists(doc.get("sdists", []), where, served[0])
    return Manifest(base_url=doc["base_url"], wheels=wheels, sdists=sdists)


def read_sdists(entries: list[dict[str, Any]], where: str, project: str) -> dict[str, PublishedSdist]:
    """The manifest's sdists, each checked as a new one is (index/sdists.py); never two of one version."""
    sdists: dict[str, PublishedSdist] = {}
    versions: dict[object, str] = {}
    for entry in entries:
        sdist = PublishedSdist.from_json(entry, where, project)
        twin = versions.get(version_key(sdist.version))
        if twin is not None:
            raise IndexInputError(f"{where}: {sdist.filename} and {twin}: two sdists of version {sdist.version}; "
                                  "refusing to merge")
        versions[version_key(sdist.version)] = sdist.filename
        sdists[sdist.filename] = sdist
    return sdists
