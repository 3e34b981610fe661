"""Relabel a wheel a project's own PEP 517 backend built (setuptools + torch.utils.cpp_extension, ...) as a kiln
wheel: the step between the backend's build and kiln's repair and audit, as cibuildwheel drives a project's
backend and then repairs what it built.

The backend knows nothing of the torch it was built against, so kiln writes what follows from it, every place
agreeing: the local version label (``0.3.0`` -> ``0.3.0+pt214cu130``) in the file name, the ``.dist-info``
folder and METADATA's Version; exactly one unconditional ``Requires-Dist: torch>=2.14,<2.15``; the build info
``<package>/_build_info.json`` (its ``targets``, when None, set to the compiled libraries the wheel holds, as
the import guard loads them); kiln's import guard ``<package>/_kiln/`` (kiln_tool/guard, verbatim:
docs/import-guard.md); and a RECORD with every file's sha256 and size. WHEEL and its tags are kept;
every other METADATA line and its body are kept byte for byte. The output is deterministic (members sorted,
the dist-info last and RECORD last of all, one date from SOURCE_DATE_EPOCH, fixed modes and deflate level),
written atomically, and must pass kiln_tool.kiln_wheel before it is renamed into place.

Refused, with one :class:`RelabelError` line and nothing left in the output folder: an archive
kiln_tool.safezip refuses, a wheel of another project, a version that already has a local label or a build
tag, a pure wheel, two ``.dist-info`` folders, METADATA that packaging refuses, a RECORD that does not
describe the archive, a package that already ships a build info or a ``_kiln/`` folder, and anything the
kiln-wheel definition forbids (member names kiln never writes, entry points, ``.data`` folders).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import stat
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from packaging.metadata import ExceptionGroup, InvalidMetadata, Metadata
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import InvalidTag
from packaging.utils import InvalidName, InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from . import kiln_wheel
from .build_info import GUARD_FOLDER, guard_files, library_targets
from .epoch import ZIP_EPOCH_MIN
from .safezip import SafeZip, UnsafeArchiveError

DEFLATE_LEVEL = 6
"""zlib's own default: fixed, so that one input gives one output whatever a Python's zipfile defaults to."""
FILE_MODE = 0o644
EXEC_MODE = 0o755
ZIP_EPOCH_MAX = 4354819199  # 2107-12-31 23:59:59, the last time a zip entry can hold
LABEL = re.compile(r"[a-z0-9]{1,32}")
DROPPED = frozenset({"top_level.txt"})
"""``.dist-info`` files setuptools writes that no installer reads (egg-era metadata) and kiln wheels lack."""


class RelabelError(ValueError):
    """The wheel cannot be relabelled: one line naming the cause (exit 2); nothing was written."""


@dataclass(frozen=True)
class _Source:
    """What the backend's wheel holds, once its RECORD, METADATA and WHEEL passed."""

    dist_info: str
    record: dict[str, tuple[bytes, int]]  # file -> (sha256 digest, size) as RECORD states them
    metadata: bytes


def relabel_wheel(wheel: Path, out_dir: Path, *, package: str, project: str, local_label: str,
                  torch_requirement: str, build_info: dict[str, Any], epoch: str, keep_version: bool = False) -> Path:
    """Write ``wheel`` (the backend's) relabelled into ``out_dir`` as ``<name>-<base>+<label>-<tags>.whl``.

    ``torch_requirement`` (``torch>=2.14,<2.15``) replaces whatever torch requirement the backend wrote,
    because a missing or wider pin is how such a wheel fails: its extension links against one torch minor's
    C++ ABI, yet pip would install it beside any torch, and the first import then dies in the dynamic
    loader with ``undefined symbol`` instead of pip refusing the combination. ``build_info`` is written as
    ``<package>/_build_info.json`` with its ``version`` set to the new version. ``epoch`` is
    SOURCE_DATE_EPOCH (clamped to 1980, the earliest a zip holds). Returns the written wheel's path.
    ``keep_version``: the version stays the backend's plain one, ``local_label`` only checked (a build from kiln's
    sdist: pip discards a wheel whose version differs from the sdist's name; kiln_tool.sdist_backend); the pin,
    the build info and the guard as always.
    """
    try:
        return _relabel(wheel, out_dir, package=package, project=project, local_label=local_label,
                        torch_requirement=torch_requirement, build_info=build_info, epoch=epoch,
                        keep_version=keep_version)
    except (RelabelError, UnsafeArchiveError, kiln_wheel.NotAKilnWheel) as exc:
        shown = wheel.name if wheel.name.isprintable() else repr(wheel.name)
        raise RelabelError(f"{shown}: {_printable(str(exc))}") from None


def _relabel(wheel: Path, out_dir: Path, *, package: str, project: str, local_label: str,
             torch_requirement: str, build_info: dict[str, Any], epoch: str, keep_version: bool = False) -> Path:
    try:
        project = canonicalize_name(project, validate=True)
    except InvalidName:
        raise RelabelError(f"project {project!r} is not a valid project name") from None
    if not (package.isascii() and package.isidentifier()):
        raise RelabelError(f"package {package!r} is not an importable package name")
    if not LABEL.fullmatch(local_label):
        raise RelabelError(f"local label {local_label!r} is not one kiln writes (lowercase letters and digits, "
                           "like pt214cu130)")
    _check_torch_requirement(torch_requirement)
    date_time = _zip_date_time(epoch)
    base, tags_text, tags = _input_name(wheel.name, project)
    version = base if keep_version else f"{base}+{local_label}"
    try:
        # A kept version is checked as the labelled name it stands for: every other part by kiln's rules.
        kiln_name = kiln_wheel.check_name(f"{project.replace('-', '_')}-{base}+{local_label}-{tags_text}.whl",
                                           project, package)
    except kiln_wheel.NotAKilnWheel as exc:
        raise RelabelError(f"relabelled it would not be a kiln wheel: {exc}") from None
    if keep_version:
        kiln_name = replace(kiln_name, filename=f"{project.replace('-', '_')}-{base}-{tags_text}.whl", version=base)
    _build_info_bytes(build_info, version, project, package)  # refuse a bad build info before reading the wheel
    guard = {f"{package}/{GUARD_FOLDER}/{name}": data for name, data in guard_files().items()}
    if not wheel.is_file():
        raise RelabelError("no such wheel file")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RelabelError(f"cannot create the output folder {out_dir} ({exc.strerror or exc})") from None
    target = out_dir / kiln_name.filename
    try:
        with SafeZip(wheel) as archive:
            source = _read_source(archive, project, base, tags)
            metadata = _relabel_metadata(source.metadata, project, base, version, torch_requirement)
            plan = _plan(archive, source, kiln_name, package, sorted(guard))
            if "targets" in build_info and build_info["targets"] is None:  # backend_build_info: kiln fills it
                kind = str(build_info.get("libraries") or "python-module")
                build_info = {**build_info, "targets": library_targets(package, kind, list(archive.members))}
            generated = {**guard, f"{package}/{kiln_wheel.BUILD_INFO}":
                         _build_info_bytes(build_info, version, project, package)}
            fd, temp_name = tempfile.mkstemp(dir=out_dir, prefix=f".{kiln_name.filename}.", suffix=".tmp")
            temp = Path(temp_name)
            try:
                with os.fdopen(fd, "w+b") as fh:
                    _write(fh, archive, source, plan, kiln_name, metadata, generated, date_time)
                if not keep_version:  # kiln_wheel defines the published (labelled) wheels
                    with SafeZip(temp) as written:
                        kiln_wheel.check_archive(kiln_name, written)
                temp.chmod(0o644)
                temp.replace(target)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
    except OSError as exc:
        raise RelabelError(f"cannot read it or write {target} ({exc.strerror or exc})") from None
    return target


def _printable(text: str) -> str:
    """One line: characters a terminal would not show as themselves are escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _check_torch_requirement(text: str) -> None:
    if not (text.isascii() and text.isprintable()) or text != text.strip():
        raise RelabelError(f"torch requirement {text!r} is not one plain line")
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise RelabelError(f"torch requirement {text!r} is not a requirement") from None
    if canonicalize_name(req.name) != "torch" or req.extras or req.marker is not None or req.url is not None \
            or not req.specifier:
        raise RelabelError(f"torch requirement {text!r} is not torch with a version pin (like torch>=2.14,<2.15)")


def _zip_date_time(epoch: str) -> tuple[int, int, int, int, int, int]:
    try:
        seconds = int(epoch)
    except ValueError:
        raise RelabelError(f"SOURCE_DATE_EPOCH {epoch!r} is not a number of seconds") from None
    seconds = min(max(seconds, int(ZIP_EPOCH_MIN)), ZIP_EPOCH_MAX)
    return time.gmtime(seconds)[:6]


def _input_name(filename: str, project: str) -> tuple[str, str, list[str]]:
    """The base version, the tag triple as spelled and the tags (sorted) of the backend's wheel file name."""
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion, InvalidTag) as exc:
        raise RelabelError(f"not a wheel file name ({_one_line(str(exc), 160)})") from None
    if name != project:
        raise RelabelError(f"a wheel of {name!r}, not of this project {project!r}")
    if build:
        raise RelabelError(f"the backend's file name has a build tag ({build[0]}{build[1]}); kiln wheels have none")
    if version.local is not None:
        raise RelabelError(f"version {version} already has a local label; kiln sets the label "
                           "(build without one)")
    return str(version), filename[:-len(".whl")].split("-", 2)[2], sorted(str(t) for t in tags)


def _build_info_bytes(build_info: dict[str, Any], version: str, project: str, package: str) -> bytes:
    if not isinstance(build_info, dict):
        raise RelabelError("build info: not a JSON object")
    for key, expected in (("project", project), ("package", package)):
        if key in build_info and build_info[key] != expected:
            raise RelabelError(f"build info: {key} {build_info[key]!r} is not {expected!r}")
    try:
        text = json.dumps({**build_info, "version": version}, sort_keys=True, indent=2, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RelabelError(f"build info: not JSON ({_one_line(str(exc), 120)})") from None
    return (text + "\n").encode()


def _read_source(archive: SafeZip, project: str, base: str, tags: list[str]) -> _Source:
    tops = {member.split("/", 1)[0] for member in archive.members if "/" in member}
    folders = sorted(t for t in tops if t.endswith(".dist-info"))
    if len(folders) != 1:
        raise RelabelError(f"{len(folders)} .dist-info folders ({', '.join(folders) or 'none'}); a wheel has one")
    (dist_info,) = folders
    name, sep, version = dist_info[:-len(".dist-info")].partition("-")
    if not sep or canonicalize_name(name) != project or not _same_version(version, base):
        raise RelabelError(f"{dist_info} is not the file name's {project} {base}")
    data = sorted(t for t in tops if t.endswith(".data"))
    if data:
        raise RelabelError(f"{data[0]}: a .data folder (installed outside the package); kiln wheels have none")
    small = {}
    for part in ("RECORD", "METADATA", "WHEEL"):
        member = f"{dist_info}/{part}"
        info = archive.members.get(member)
        if info is None or info.is_dir():
            raise RelabelError(f"no {member}")
        small[part] = archive.read(member, kiln_wheel.MAX_SMALL_MEMBER)
    _check_wheel_file(small["WHEEL"], tags, dist_info)
    record = _parse_record(small["RECORD"], f"{dist_info}/RECORD")
    files = {m for m, info in archive.members.items() if not info.is_dir()}
    if set(record) != files:
        extra, missing = sorted(set(record) - files)[:3], sorted(files - set(record))[:3]
        raise RelabelError(f"RECORD does not list exactly the wheel's files (not in the wheel: {extra}, "
                           f"not in RECORD: {missing})")
    for part in ("METADATA", "WHEEL"):
        _check_recorded(record, f"{dist_info}/{part}", hashlib.sha256(small[part]).digest(), len(small[part]))
    return _Source(dist_info, record, small["METADATA"])


def _same_version(text: str, base: str) -> bool:
    try:
        return Version(text) == Version(base) and Version(text).local is None
    except InvalidVersion:
        return False


def _check_wheel_file(raw: bytes, tags: list[str], dist_info: str) -> None:
    try:
        headers = kiln_wheel.metadata_headers(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RelabelError(f"{dist_info}/WHEEL: unreadable ({_one_line(str(exc), 120)})") from None
    purelib = headers.get("root-is-purelib", [])
    if purelib == ["true"]:
        raise RelabelError("WHEEL: Root-Is-Purelib true, a pure wheel; kiln relabels binary wheels built "
                           "against torch")
    if purelib != ["false"]:
        raise RelabelError(f"WHEEL: Root-Is-Purelib {purelib!r} is not one 'false'")
    if "build" in headers:
        raise RelabelError("WHEEL: a Build line (the backend set a build tag); kiln wheels have none")
    if sorted(headers.get("tag", [])) != tags:
        raise RelabelError(f"WHEEL: Tag lines {sorted(headers.get('tag', []))} are not the file name's tags {tags}")


def _parse_record(raw: bytes, where: str) -> dict[str, tuple[bytes, int]]:
    try:
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise RelabelError(f"{where}: unreadable ({_one_line(str(exc), 120)})") from None
    record: dict[str, tuple[bytes, int]] = {}
    seen: set[str] = set()
    for row in rows:
        if not row:
            continue
        if len(row) != 3 or row[0] in seen:
            raise RelabelError(f"{where}: a malformed or repeated line for {row[0]!r}")
        seen.add(row[0])
        path, digest, size = row
        if path == where:
            continue
        algorithm, _, encoded = digest.partition("=")
        try:
            decoded = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            length = int(size)
        except ValueError:
            raise RelabelError(f"{where}: the line for {path!r} has no readable hash and size") from None
        if algorithm != "sha256" or len(decoded) != 32 or length < 0:
            raise RelabelError(f"{where}: the line for {path!r} is not a sha256 hash and a size")
        record[path] = (decoded, length)
    if where not in seen:
        raise RelabelError(f"{where}: does not list itself")
    record[where] = (b"", 0)
    return record


def _check_recorded(record: dict[str, tuple[bytes, int]], member: str, digest: bytes, size: int) -> None:
    if record[member] != (digest, size):
        raise RelabelError(f"RECORD: {member} is not the file RECORD describes (hash or size)")


def _relabel_metadata(raw: bytes, project: str, base: str, version: str, torch_requirement: str) -> bytes:
    """METADATA with its Version and torch requirement rewritten; every other line kept byte for byte."""
    try:
        text = raw.decode("utf-8")
        parsed = Metadata.from_email(raw, validate=True)
    except UnicodeDecodeError:
        raise RelabelError("METADATA: not UTF-8") from None
    except (InvalidMetadata, ExceptionGroup) as exc:
        first = exc.exceptions[0] if isinstance(exc, ExceptionGroup) else exc
        raise RelabelError(f"METADATA: packaging refuses it ({_one_line(str(first), 160)})") from None
    if canonicalize_name(parsed.name) != project:
        raise RelabelError(f"METADATA: Name {parsed.name!r} is not this project {project!r}")
    if parsed.version != Version(base) or parsed.version.local is not None:
        raise RelabelError(f"METADATA: Version {str(parsed.version)!r} is not the file name's {base!r}")
    headers, body = _split_headers(text)
    eol = "\r\n" if headers[0][0].endswith("\r\n") else "\n"
    out: list[list[str]] = []
    pin_at: int | None = None
    last_requirement: int | None = None
    for lines in headers:
        key = lines[0].partition(":")[0].lower()
        if key == "version":
            ending = lines[-1][len(lines[-1].rstrip("\r\n")):] or eol
            out.append([f"Version: {version}{ending}"])
            continue
        if key == "requires-dist":
            if _requirement_name(" ".join("".join(lines).partition(":")[2].split())) == "torch":
                if pin_at is None:
                    pin_at = len(out)
                continue
            last_requirement = len(out)
        out.append(lines)
    if pin_at is None:
        pin_at = len(out) if last_requirement is None else last_requirement + 1
    if pin_at > 0 and not out[pin_at - 1][-1].endswith("\n"):
        out[pin_at - 1] = [*out[pin_at - 1][:-1], out[pin_at - 1][-1] + eol]
    out.insert(pin_at, [f"Requires-Dist: {torch_requirement}{eol}"])
    return ("".join(line for lines in out for line in lines) + body).encode()


def _requirement_name(text: str) -> str:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:  # packaging read it whole; split by line it may not parse alone
        raise RelabelError(f"METADATA: Requires-Dist {text[:80]!r} is not a requirement") from None


def _split_headers(text: str) -> tuple[list[list[str]], str]:
    """The header block as fields (each its lines, continuation lines included, endings kept) and the rest
    (the blank line and the body) verbatim."""
    lines = re.split(r"(?<=\n)", text)
    fields: list[list[str]] = []
    body_at = len(lines)
    for at, line in enumerate(lines):
        if line.rstrip("\r\n") == "":
            body_at = at
            break
        if line[:1] in (" ", "\t") and fields:
            fields[-1].append(line)
        elif re.match(r"[A-Za-z0-9-]+:", line):
            fields.append([line])
        else:
            raise RelabelError(f"METADATA: {line.rstrip()[:60]!r} is not a header line")
    if not fields:
        raise RelabelError("METADATA: no header block")
    return fields, "".join(lines[body_at:])


@dataclass(frozen=True)
class _Entry:
    """One file of the relabelled wheel: where it comes from (None: written by kiln) and its mode."""

    name: str
    source: str | None
    mode: int


def _plan(archive: SafeZip, source: _Source, kiln_name: kiln_wheel.KilnName, package: str,
          guard: list[str]) -> list[_Entry]:
    """The relabelled wheel's members in the order they are written (``guard``: the import guard's files)."""
    build_info = f"{package}/{kiln_wheel.BUILD_INFO}"
    shipped = sorted(m for m in archive.members if m.rsplit("/", 1)[-1].casefold() == kiln_wheel.BUILD_INFO)
    if shipped:
        raise RelabelError(f"{shipped[0]}: the backend's wheel ships a build info; kiln writes {build_info}")
    folder = f"{package}/{GUARD_FOLDER}/".casefold()
    clash = sorted(m for m in archive.members if m.casefold().startswith(folder))
    if clash:
        raise RelabelError(f"{clash[0]}: the backend's wheel ships {package}/{GUARD_FOLDER}/; kiln writes its "
                           "import guard there")
    if not any(m.startswith(f"{package}/") for m in archive.members):
        raise RelabelError(f"no package {package}/ in the wheel (is tool.kiln.package right?)")
    old, new = source.dist_info, kiln_name.dist_info
    entries = [_Entry(build_info, None, FILE_MODE), *(_Entry(name, None, FILE_MODE) for name in guard)]
    for member, info in archive.members.items():
        if info.is_dir() or member == f"{old}/RECORD":
            continue
        top, _, rest = member.partition("/")
        if top == old and rest in DROPPED:
            continue
        renamed = f"{new}/{rest}" if top == old else member
        problem = kiln_wheel.member_rule(kiln_name, renamed)
        if problem:
            raise RelabelError(problem)
        mode = EXEC_MODE if (info.external_attr >> 16) & 0o111 else FILE_MODE
        entries.append(_Entry(renamed, member, mode))
    entries.sort(key=lambda e: (e.name.startswith(f"{new}/"), e.name))
    return [*entries, _Entry(f"{new}/RECORD", None, FILE_MODE)]


def _zip_info(name: str, date_time: tuple[int, int, int, int, int, int], mode: int, size: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # Unix: external_attr holds the mode
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.file_size = size
    if sys.version_info >= (3, 13):
        info.compress_level = DEFLATE_LEVEL
    else:
        info._compresslevel = DEFLATE_LEVEL  # type: ignore[attr-defined]  # public from 3.13
    return info


def _write(fh: IO[bytes], archive: SafeZip, source: _Source, plan: list[_Entry], kiln_name: kiln_wheel.KilnName,
           metadata: bytes, written_by_kiln: dict[str, bytes],
           date_time: tuple[int, int, int, int, int, int]) -> None:
    """Write the planned members, each source file streamed and checked against the input RECORD on the way
    (its hash and size; the dropped files too), then RECORD. ``written_by_kiln``: the build info and the
    import guard's files, by member name."""
    generated = {**written_by_kiln, f"{kiln_name.dist_info}/METADATA": metadata}
    rows: list[tuple[str, str, str]] = []
    with zipfile.ZipFile(fh, "w") as out:
        for entry in plan[:-1]:
            if entry.name in generated:
                chunks: Iterable[bytes] = (generated[entry.name],)
                size = len(generated[entry.name])
            else:
                assert entry.source is not None
                chunks = archive.stream(entry.source)
                size = archive.members[entry.source].file_size
            digest = hashlib.sha256()
            written = 0
            with out.open(_zip_info(entry.name, date_time, entry.mode, size), "w") as dest:
                for chunk in chunks:
                    digest.update(chunk)
                    written += len(chunk)
                    dest.write(chunk)
            if entry.source is not None and entry.name not in generated:
                _check_recorded(source.record, entry.source, digest.digest(), written)
            rows.append((entry.name, "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode(),
                         str(written)))
        for dropped in sorted(set(source.record) - {e.source for e in plan} - {f"{source.dist_info}/RECORD"}):
            digest = hashlib.sha256()
            written = 0
            for chunk in archive.stream(dropped):
                digest.update(chunk)
                written += len(chunk)
            _check_recorded(source.record, dropped, digest.digest(), written)
        record_name = plan[-1].name
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerows([*rows, (record_name, "", "")])
        record = text.getvalue().encode()
        out.writestr(_zip_info(record_name, date_time, FILE_MODE, len(record)), record)


__all__ = ["RelabelError", "relabel_wheel"]
