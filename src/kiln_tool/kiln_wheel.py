"""What a kiln wheel is: one positive definition shared by `kiln index`, `kiln audit` and `kiln repair`.

A wheel is kiln's when its project is the project kiln serves (the ``[tool.kiln]`` table of the current
directory: kiln_tool.project). Such a wheel must have exactly the shape kiln builds, and nothing else:

- its file name is ``<name>-<version>-<python>-<abi>-<platform>.whl`` spelled as kiln spells it
  (the project's wheel spelling, the version in PEP 440 normal form, no build tag, one CPython tag,
  its own ABI or abi3, Linux platform tags of one architecture);
- its members are the package (``<package>/``), the libraries auditwheel grafted (``<package>.libs/*.so*``)
  and its ``.dist-info`` (METADATA, WHEEL, RECORD, sboms/, licenses/): an allowlist of shapes. No
  ``.data``, no top-level modules or ``.pth`` files, no entry points, no second ``.dist-info``;
- one build info, at ``<package>/_build_info.json``, every field cross-checked against the file name, the
  tags, WHEEL and METADATA (project, package, version, Python tag, ABI mode, torch minor, CUDA tag, torch pin);
- WHEEL: ``Wheel-Version: 1.0``, ``Root-Is-Purelib: false``, its Tag lines exactly the file name's tags;
- METADATA: its Name and Version those of the file name, ``Requires-Python`` a plain specifier of
  bounded length, dependencies by name only (no direct URL), the torch pin the build info implies;
- RECORD lists exactly the files of the wheel, each with its sha256 and size.

Each rule raises :class:`NotAKilnWheel` with one line naming it. A wheel of another project is not
judged here: the audit judges foreign wheels (torchvision, torchaudio, ...) by the generic archive
rules of kiln_tool.safezip alone, and the index and repair refuse them as another project's.
"""

from __future__ import annotations

import base64
import csv
import functools
import io
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.tags import Tag
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .project import project_wheel
from .safezip import SafeZip, UnsafeArchiveError

if TYPE_CHECKING:
    from packaging.requirements import Requirement

# packaging.requirements / .specifiers (their parsers compile dozens of regexes) and kiln_tool.variant are imported
# where a kiln wheel's own metadata is checked: `kiln audit` of any other wheel never needs them.

MAX_NAME_LENGTH = 200
MAX_VERSION_LENGTH = 64
MAX_SPECIFIER_LENGTH = 100
MAX_SMALL_MEMBER = 1 << 20
"""METADATA, WHEEL, RECORD and the build info are read whole: no kiln wheel has one larger than this."""

PLATFORM = re.compile(r"(linux|manylinux_[0-9]{1,2}_[0-9]{1,3}|manylinux1|manylinux2010|manylinux2014)"
                      r"_(x86_64|aarch64)")
CPYTHON = re.compile(r"cp3[0-9]{1,2}")
CUDA_TAG = re.compile(r"cpu|cu[0-9]{2,4}")
TORCH_MAJOR_MINOR = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")
BUILD_INFO_PYTHON_TAG = re.compile(r"cp3[0-9]{1,2}(-abi3)?")
_VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,4}((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?\+[a-z0-9]+")
_SPECIFIER = re.compile(r"(<=|>=|==|!=|~=|<|>)[0-9]+(\.[0-9]+)*(\.\*)?")
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_LIBRARY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\.so(\.[0-9A-Za-z_]+)*")
_DEPENDENCY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_METADATA_VERSIONS = ("2.1", "2.2", "2.3", "2.4")
BUILD_INFO = "_build_info.json"


class NotAKilnWheel(ValueError):
    """The wheel breaks a rule of the kiln-wheel definition; the message names the rule (exit 2)."""


@dataclass(frozen=True)
class KilnName:
    """The parts of a kiln wheel's file name."""

    filename: str
    project: str
    version: str
    python: str
    abi: str
    platforms: tuple[str, ...]
    package: str
    """The import package (``[tool.kiln] package``): where the build info and the grafted libraries live."""

    @property
    def dist_info(self) -> str:
        return f"{self.project.replace('-', '_')}-{self.version}.dist-info"

    @property
    def tags(self) -> frozenset[Tag]:
        return frozenset(Tag(self.python, self.abi, p) for p in self.platforms)

    @property
    def python_tag(self) -> str:
        """The build info's spelling: ``cp311``, or ``cp310-abi3`` for a stable-ABI wheel."""
        return f"{self.python}-abi3" if self.abi == "abi3" else self.python


def served() -> tuple[str, str]:
    """(canonical name, import package) of the project kiln serves here (kiln_tool.project.current_project)."""
    from .project import current_project

    project = current_project()
    return project.name, project.package


def check_name(filename: str, project: str | None = None, package: str | None = None) -> KilnName:
    """The parts of ``filename`` when it is a kiln wheel's name exactly as kiln writes it (else NotAKilnWheel).
    ``project`` (canonical) and ``package``: the project's; by default those of the project kiln serves."""
    if project is None:
        project, served_package = served()
        package = package or served_package
    return _check_name(filename, project, package or project.replace("-", "_"))


@functools.cache
def _check_name(filename: str, project: str, package: str) -> KilnName:
    if len(filename) > MAX_NAME_LENGTH:
        raise NotAKilnWheel(f"file name: longer than {MAX_NAME_LENGTH} characters")
    if not filename.endswith(".whl"):
        raise NotAKilnWheel("file name: not a .whl")
    parts = filename[:-4].split("-")
    if len(parts) == 6:
        raise NotAKilnWheel(f"file name: a build tag ({parts[2]!r}); kiln wheels have none "
                            "(pip would prefer it over the published file: publish a new version)")
    if len(parts) != 5:
        raise NotAKilnWheel("file name: not name-version-python-abi-platform.whl")
    name, version, python, abi, platform = parts
    if canonicalize_name(name) != project:
        raise NotAKilnWheel(f"project: {name!r} is not this site's project {project!r}")
    if name != project.replace("-", "_"):
        raise NotAKilnWheel(f"file name: the project is spelled {name!r}, kiln writes {project.replace('-', '_')!r}")
    check_version(version)
    if not CPYTHON.fullmatch(python):
        raise NotAKilnWheel(f"file name: Python tag {python!r} is not one CPython tag (cp3XX)")
    if abi not in (python, "abi3"):
        raise NotAKilnWheel(f"file name: ABI tag {abi!r} is neither {python!r} nor abi3")
    platforms = platform.split(".")
    if len(platforms) > 8 or len(set(platforms)) != len(platforms):
        raise NotAKilnWheel(f"file name: platform tags {platform!r} are not a short set")
    arches = set()
    for tag in platforms:
        match = PLATFORM.fullmatch(tag)
        if match is None:
            raise NotAKilnWheel(f"file name: platform tag {tag!r} is not a Linux tag kiln builds "
                                "(linux_/manylinux_X_Y_ for x86_64 or aarch64)")
        arches.add(match.group(2))
    if len(arches) != 1:
        raise NotAKilnWheel(f"file name: platform tags {platform!r} name more than one architecture")
    return KilnName(filename, project, version, python, abi, tuple(sorted(platforms)), package)


@functools.cache
def check_version(text: str) -> Version:
    """A version as kiln writes it: PEP 440 normal form with a local label, at most MAX_VERSION_LENGTH long."""
    if len(text) > MAX_VERSION_LENGTH:
        raise NotAKilnWheel(f"version: longer than {MAX_VERSION_LENGTH} characters")
    try:
        version = Version(text)
    except InvalidVersion:
        raise NotAKilnWheel(f"version: {text!r} is not a PEP 440 version") from None
    if str(version) != text or not _VERSION.fullmatch(text):
        raise NotAKilnWheel(f"version: {text!r} is not in the normal form kiln writes "
                            f"(like 0.1.0+pt213cpu; normal form {str(version)!r})")
    return version


def _plain_specifier(text: str, what: str, example: str) -> str:
    """Comma-separated plain clauses (no ``===``, no spaces inside a clause), bounded, that packaging parses."""
    if len(text) > MAX_SPECIFIER_LENGTH:
        raise NotAKilnWheel(f"{what}: longer than {MAX_SPECIFIER_LENGTH} characters")
    clauses = [c.strip() for c in text.split(",")]
    if not all(_SPECIFIER.fullmatch(c) for c in clauses):
        raise NotAKilnWheel(f"{what}: {text!r} is not a plain version specifier (like {example})")
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        raise NotAKilnWheel(f"{what}: {text!r} is not a version specifier") from None
    return text


@functools.cache
def check_requires_python(text: str) -> str:
    """``Requires-Python`` as kiln writes it."""
    return _plain_specifier(text, "Requires-Python", ">=3.10")


@functools.cache
def check_torch_requirement(text: str) -> str:
    """The torch pin as the manifest keeps it (``<2.14,>=2.13``)."""
    return _plain_specifier(text, "torch requirement", ">=2.13,<2.14")


def metadata_headers(raw: bytes) -> dict[str, list[str]]:
    """The header block of a core metadata file (RFC 822 style), keys lower-cased; continuation lines joined."""
    text = raw.decode("utf-8").replace("\r\n", "\n")
    head = text.split("\n\n", 1)[0] if not text.startswith("\n") else ""
    headers: dict[str, list[str]] = {}
    key: str | None = None
    for line in head.removesuffix("\n").split("\n"):
        if line[:1] in (" ", "\t") and key is not None:
            headers[key][-1] += "\n" + line
            continue
        field, sep, value = line.partition(":")
        if not sep or not field or field != field.strip():
            raise ValueError(f"not a header line: {line[:60]!r}")
        key = field.lower()
        headers.setdefault(key, []).append(value.strip())
    return headers


def _one(headers: dict[str, list[str]], key: str, where: str, required: bool = True) -> str | None:
    values = headers.get(key.lower(), [])
    if len(values) > 1:
        raise NotAKilnWheel(f"{where}: {key} appears {len(values)} times")
    if not values:
        if required:
            raise NotAKilnWheel(f"{where}: no {key}")
        return None
    return values[0]


@dataclass(frozen=True)
class KilnWheel:
    """A wheel that passed every rule: what the index lists and the audit and repair accept as kiln's."""

    name: KilnName
    metadata: bytes
    build_info: dict[str, Any]
    requires_python: str | None
    torch_requirement: str
    abi_mode: str
    cuda_tag: str
    torch_major_minor: str


def member_rule(name: KilnName, member: str) -> str | None:
    """Why ``member`` has no place in the kiln wheel ``name`` (None when its shape is allowed)."""
    package, dist_info = name.package, name.dist_info
    top, _, rest = member.partition("/")
    parts = [p for p in rest.split("/") if p] if rest else []
    if not all(_PART.fullmatch(p) for p in [top, *parts]):
        return f"members: {member!r} has a name part kiln never writes"
    if top == package:
        return None
    if top == f"{package}.libs":
        if not parts or (len(parts) == 1 and _LIBRARY.fullmatch(parts[0])):
            return None
        return f"members: {member!r} in {package}.libs/ is not a shared library grafted by auditwheel"
    if top == dist_info:
        allowed = (not parts or (len(parts) == 1 and parts[0] in ("METADATA", "WHEEL", "RECORD", "sboms", "licenses"))
                   or (parts[0] == "sboms" and len(parts) == 2 and parts[1].endswith(".json"))
                   or parts[0] == "licenses")
        if allowed:
            return None
        if parts[0] == "entry_points.txt":
            return f"members: {member!r}: kiln wheels have no entry points (console scripts can shadow installers)"
        return f"members: {member!r} is not a file kiln writes in {dist_info}/"
    if top.endswith(".dist-info"):
        return f"members: a second .dist-info folder {top!r} (installers disagree on which one describes the wheel)"
    if top.endswith(".data"):
        return (f"members: {member!r}: a .data folder (scripts, headers and data would be installed outside "
                "the package, e.g. over pip or python)")
    if not rest and top.endswith(".pth"):
        return f"members: {member!r}: a top-level .pth file runs code at every interpreter start"
    if top.split(".")[0] in ("sitecustomize", "usercustomize"):
        return f"members: {member!r} runs code at every interpreter start"
    return f"members: {member!r} lies outside {package}/, {package}.libs/ and {dist_info}/"


def check_members(name: KilnName, members: list[str], directories: set[str]) -> None:
    """Every member has an allowed shape; one build info at its one path; METADATA, WHEEL and RECORD exist."""
    for member in members:
        problem = member_rule(name, member)
        if problem:
            raise NotAKilnWheel(problem)
    infos = sorted(m for m in members if m.rsplit("/", 1)[-1].casefold() == BUILD_INFO)
    expected = f"{name.package}/{BUILD_INFO}"
    if infos != [expected]:
        if not infos:
            raise NotAKilnWheel(f"build info: no {expected} (not a wheel built by kiln)")
        raise NotAKilnWheel(f"build info: {', '.join(infos)}; a kiln wheel has exactly one, {expected}")
    for required in ("METADATA", "WHEEL", "RECORD"):
        path = f"{name.dist_info}/{required}"
        if path not in members or path in directories:
            raise NotAKilnWheel(f"members: no {path}")


def _record_digest(data_sha256: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(data_sha256).rstrip(b"=").decode()


def check_record(name: KilnName, raw: bytes, files: dict[str, tuple[bytes, int]]) -> None:
    """RECORD lists exactly ``files`` (member -> (sha256 digest, size)), each with its hash and size."""
    record = f"{name.dist_info}/RECORD"
    try:
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise NotAKilnWheel(f"RECORD: unreadable ({exc})") from None
    listed: dict[str, tuple[str, str]] = {}
    for row in rows:
        if not row:
            continue
        if len(row) != 3 or row[0] in listed:
            raise NotAKilnWheel(f"RECORD: a malformed or repeated line for {row[0] if row else ''!r}")
        listed[row[0]] = (row[1], row[2])
    if set(listed) != set(files):
        extra = sorted(set(listed) - set(files))[:3]
        missing = sorted(set(files) - set(listed))[:3]
        raise NotAKilnWheel(f"RECORD: does not list exactly the wheel's files (not in the wheel: {extra}, "
                            f"not in RECORD: {missing})")
    for member, (digest, size) in files.items():
        if member == record:
            continue
        if listed[member] != (_record_digest(digest), str(size)):
            raise NotAKilnWheel(f"RECORD: {member} is not the file RECORD describes (hash or size)")


def check_wheel_file(name: KilnName, raw: bytes) -> None:
    where = f"{name.dist_info}/WHEEL"
    try:
        headers = metadata_headers(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotAKilnWheel(f"WHEEL: unreadable ({exc})") from None
    if _one(headers, "Wheel-Version", where) != "1.0":
        raise NotAKilnWheel(f"WHEEL: Wheel-Version {headers['wheel-version'][0]!r}; kiln wheels are 1.0")
    purelib = _one(headers, "Root-Is-Purelib", where)
    if purelib != "false":
        raise NotAKilnWheel(f"WHEEL: Root-Is-Purelib {purelib!r}; a binary kiln wheel installs to platlib (false)")
    if "build" in headers:
        raise NotAKilnWheel("WHEEL: a Build line; kiln wheels have no build tag")
    tags = headers.get("tag", [])
    expected = sorted(str(t) for t in name.tags)
    if sorted(tags) != expected:
        raise NotAKilnWheel(f"WHEEL: Tag lines {sorted(tags)} are not the file name's tags {expected}")


def _metadata(name: KilnName, raw: bytes) -> tuple[str | None, list[Requirement]]:
    from packaging.requirements import InvalidRequirement, Requirement

    where = "METADATA"
    try:
        headers = metadata_headers(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotAKilnWheel(f"METADATA: unreadable ({exc})") from None
    if _one(headers, "Metadata-Version", where) not in _METADATA_VERSIONS:
        raise NotAKilnWheel(f"METADATA: Metadata-Version {headers['metadata-version'][0]!r} is not one of "
                            f"{', '.join(_METADATA_VERSIONS)}")
    meta_name = _one(headers, "Name", where) or ""
    if canonicalize_name(meta_name) != name.project:
        raise NotAKilnWheel(f"METADATA: Name {meta_name[:80]!r} is not the file name's project {name.project!r}")
    version = _one(headers, "Version", where)
    if version != name.version:
        raise NotAKilnWheel(f"METADATA: Version {str(version)[:80]!r} is not the file name's {name.version!r}")
    requires_python = _one(headers, "Requires-Python", where, required=False)
    if requires_python is not None:
        check_requires_python(requires_python)
    requirements = []
    for line in headers.get("requires-dist", []):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            raise NotAKilnWheel(f"METADATA: Requires-Dist {line[:80]!r} is not a requirement") from None
        if req.url is not None:
            raise NotAKilnWheel(f"METADATA: Requires-Dist {line[:80]!r} is a direct URL (pip fetches it, "
                                "unhashed); kiln wheels depend on names only")
        if not _DEPENDENCY.fullmatch(req.name) or len(line) > 200:
            raise NotAKilnWheel(f"METADATA: Requires-Dist {line[:80]!r} is not a plain requirement")
        requirements.append(req)
    return requires_python, requirements


def _torch_pin(requirements: list[Requirement]) -> str:
    pins = [r for r in requirements if canonicalize_name(r.name) == "torch"]
    if len(pins) != 1 or pins[0].marker is not None or pins[0].extras:
        raise NotAKilnWheel("METADATA: not exactly one unconditional torch requirement (Requires-Dist: torch...)")
    return check_torch_requirement(str(pins[0].specifier))


def check_build_info(name: KilnName, raw: bytes, torch_pin: str) -> dict[str, Any]:
    """The build info, every field cross-checked against the name, its tags and the torch pin."""
    from packaging.specifiers import SpecifierSet

    from .variant import MODES as ABI_MODES

    try:
        info = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise NotAKilnWheel(f"build info: unreadable ({str(exc)[:100]})") from None
    if not isinstance(info, dict):
        raise NotAKilnWheel("build info: not a JSON object")
    if info.get("schema") != 1:
        raise NotAKilnWheel(f"build info: schema {str(info.get('schema'))[:20]!r}, expected 1")
    required = ("project", "package", "version", "abi_mode", "torch_major_minor", "cuda_tag", "python_tag",
                "torch_version")
    missing = [key for key in required if not isinstance(info.get(key), str)]
    if missing:
        raise NotAKilnWheel(f"build info: lacks {', '.join(missing)}")
    for key, pattern in (("cuda_tag", CUDA_TAG), ("torch_major_minor", TORCH_MAJOR_MINOR),
                         ("python_tag", BUILD_INFO_PYTHON_TAG)):
        if not pattern.fullmatch(info[key]):
            raise NotAKilnWheel(f"build info: invalid {key} {info[key][:40]!r}")
    mode, cuda_tag, minor = info["abi_mode"], info["cuda_tag"], info["torch_major_minor"]
    if mode not in ABI_MODES:
        raise NotAKilnWheel(f"build info: unknown abi_mode {mode[:40]!r}")
    if info["project"] != name.project:
        raise NotAKilnWheel(f"build info: project {info['project'][:80]!r} is not the file name's {name.project!r}")
    if info["package"] != name.package:
        raise NotAKilnWheel(f"build info: package {info['package'][:80]!r} is not the project's {name.package!r}")
    if info["version"] != name.version:
        raise NotAKilnWheel(f"build info: version {info['version'][:80]!r} is not the file name's "
                            f"{name.version!r}")
    if info["python_tag"] != name.python_tag:
        raise NotAKilnWheel(f"build info: python_tag {info['python_tag']!r} is not the file name's "
                            f"{name.python_tag!r}")
    cuda = info.get("cuda")
    expected_cuda = None if cuda_tag == "cpu" else cuda_tag
    if (None if cuda is None else ("cu" + str(cuda).replace(".", ""))) != expected_cuda:
        raise NotAKilnWheel(f"build info: cuda {str(cuda)[:20]!r} is not its cuda_tag {cuda_tag!r}")
    try:
        torch_version = Version(info["torch_version"])
    except InvalidVersion:
        raise NotAKilnWheel(f"build info: torch_version {info['torch_version'][:40]!r} is not a version") from None
    # CPU kernels may be built against any build of the torch minor (KILN_VARIANT=cpu against a CUDA torch,
    # as PyPI's aarch64 torch is); CUDA kernels only against that CUDA's torch.
    other_build = torch_version.local not in (None, cuda_tag) and cuda_tag != "cpu"
    if f"{torch_version.major}.{torch_version.minor}" != minor or other_build:
        raise NotAKilnWheel(f"build info: torch_version {info['torch_version']!r} is not torch {minor} "
                            f"({cuda_tag})")
    torch_min = info.get("torch_min")
    if mode == "stable":
        if not isinstance(torch_min, str) or not TORCH_MAJOR_MINOR.fullmatch(torch_min):
            raise NotAKilnWheel(f"build info: a stable-ABI wheel needs torch_min (like 2.13), not {torch_min!r}")
        if Version(torch_min) > Version(minor):
            raise NotAKilnWheel(f"build info: torch_min {torch_min} is newer than the torch {minor} it was built "
                                "against")
        if SpecifierSet(torch_pin) != SpecifierSet(f">={torch_min}"):
            raise NotAKilnWheel(f"METADATA: torch requirement {torch_pin!r} is not '>={torch_min}' (build info "
                                "torch_min)")
    check_fields(name, mode, cuda_tag, minor, torch_pin)
    return info


def check_fields(name: KilnName, abi_mode: str, cuda_tag: str, torch_major_minor: str, torch_pin: str) -> None:
    """What the index records of a wheel agrees with its name: the rules the build info is held to, applied
    again to every manifest entry on read (one set of rules for what is read and what is written)."""
    if (abi_mode == "stable") != (name.abi == "abi3"):
        raise NotAKilnWheel(f"abi_mode {abi_mode!r} does not fit the ABI tag {name.abi!r}")
    label = _combination_rules(abi_mode, cuda_tag, torch_major_minor, torch_pin)
    local = check_version(name.version).local
    if local != label:
        raise NotAKilnWheel(f"version: local label {local!r} is not {label!r} (torch {torch_major_minor}, "
                            f"{cuda_tag}, abi_mode {abi_mode})")


@functools.cache
def _combination_rules(abi_mode: str, cuda_tag: str, torch_major_minor: str, torch_pin: str) -> str:
    """The local version label a wheel of this ABI mode, CUDA tag, torch minor and pin must have (the rules
    shared by every wheel of one combination, checked once per combination)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    from .variant import MODES as ABI_MODES

    if abi_mode not in ABI_MODES:
        raise NotAKilnWheel(f"abi_mode: unknown {abi_mode[:40]!r}")
    if not CUDA_TAG.fullmatch(cuda_tag) or not TORCH_MAJOR_MINOR.fullmatch(torch_major_minor):
        raise NotAKilnWheel(f"cuda_tag {cuda_tag[:20]!r} or torch_major_minor {torch_major_minor[:20]!r} is invalid")
    major_s, minor_s = torch_major_minor.split(".")
    try:
        pin = SpecifierSet(torch_pin)
    except InvalidSpecifier:
        raise NotAKilnWheel(f"torch requirement {torch_pin!r} is not a version specifier") from None
    if abi_mode == "torch":
        expected = SpecifierSet(f">={major_s}.{minor_s},<{major_s}.{int(minor_s) + 1}")
        if pin != expected:
            raise NotAKilnWheel(f"torch requirement {torch_pin!r} is not {str(expected)!r}, the pin of a wheel built "
                                f"against torch {torch_major_minor}")
        return f"pt{major_s}{minor_s}{cuda_tag}"
    if not any(s.operator == ">=" for s in pin) or not pin.contains(f"{torch_major_minor}.0", prereleases=True):
        raise NotAKilnWheel(f"torch requirement {torch_pin!r} does not admit the torch {torch_major_minor} the "
                            "stable-ABI wheel was built against")
    return cuda_tag


def check_contents(name: KilnName, read: dict[str, bytes], files: dict[str, tuple[bytes, int]]) -> KilnWheel:
    """The rules on METADATA, WHEEL, RECORD and the build info (``read``: those members' bytes)."""
    dist_info = name.dist_info
    check_wheel_file(name, read[f"{dist_info}/WHEEL"])
    metadata = read[f"{dist_info}/METADATA"]
    requires_python, requirements = _metadata(name, metadata)
    pin = _torch_pin(requirements)
    info = check_build_info(name, read[f"{name.package}/{BUILD_INFO}"], pin)
    check_record(name, read[f"{dist_info}/RECORD"], files)
    return KilnWheel(name=name, metadata=metadata, build_info=info, requires_python=requires_python,
                     torch_requirement=pin, abi_mode=info["abi_mode"], cuda_tag=info["cuda_tag"],
                     torch_major_minor=info["torch_major_minor"])


def check_archive(name: KilnName, archive: SafeZip) -> KilnWheel:
    """Every rule, on an archive whose central directory passed kiln_tool.safezip; every member is streamed
    (size and CRC checked, sha256 taken for RECORD). UnsafeArchiveError for corrupt data."""
    members = list(archive.members)
    directories = {m for m, info in archive.members.items() if info.is_dir()}
    check_members(name, members, directories)
    small = small_members(name)
    for member in small:
        if archive.members[member].file_size > MAX_SMALL_MEMBER:
            raise NotAKilnWheel(f"members: {member} is {archive.members[member].file_size} bytes "
                                f"(more than {MAX_SMALL_MEMBER})")
    read, files = archive.verify_hashed(frozenset(small))
    return check_contents(name, read, files)


def small_members(name: KilnName) -> tuple[str, ...]:
    """The members read whole for the checks."""
    return (f"{name.dist_info}/METADATA", f"{name.dist_info}/WHEEL", f"{name.dist_info}/RECORD",
            f"{name.package}/{BUILD_INFO}")


# Whether a wheel file name claims the project kiln serves here: kiln_tool.project's, so that kiln audit decides it
# for any wheel without importing this module.
is_kiln_project = project_wheel


__all__ = ["KilnName", "KilnWheel", "NotAKilnWheel", "UnsafeArchiveError", "check_archive",
           "check_build_info", "check_contents", "check_fields",
           "check_members", "check_name", "check_record", "check_requires_python", "check_torch_requirement",
           "check_version", "is_kiln_project", "member_rule", "metadata_headers", "served", "small_members"]
