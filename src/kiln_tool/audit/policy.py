"""Audit policies: JSON data in data/audit_policy/, one file per manylinux policy.

A policy file names its symbol-version ceilings per processor and extends common.json, which
holds what all policies share (system libraries, export allowlist, build-path markers, limits).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from .. import resources
from .errors import AuditInputError

POLICY_DIR = resources.data_path("audit_policy")
DEFAULT_POLICY = "manylinux_2_28"
_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_MANYLINUX_RE = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
_LEGACY_TAGS = {"manylinux1": "manylinux_2_5", "manylinux2010": "manylinux_2_12", "manylinux2014": "manylinux_2_17"}


class VersionCeiling(NamedTuple):
    max: tuple[int, ...] | None
    also: frozenset[str]


class Limits(NamedTuple):
    max_file_bytes: int
    max_wheel_members: int
    max_total_bytes: int
    max_compression_ratio: float
    ratio_applies_above_bytes: int


class ExportRule(NamedTuple):
    library: str
    symbols: tuple[str, ...]
    why: str


def _any_glob(patterns: Iterable[str]) -> Callable[[str], re.Match[str] | None] | None:
    """A match function that matches where fnmatch.fnmatchcase matches one of the patterns; None for none."""
    translated = [f"(?:{fnmatch.translate(p)})" for p in patterns]
    return re.compile("|".join(translated)).match if translated else None


_HEADER_EXTENSIONS = frozenset({"h", "hh", "hpp", "hxx", "h++", "cuh", "inl", "inc", "ipp", "tcc", "tpp", "def"})


@dataclass(frozen=True)
class BuildPathRule:
    """What makes an absolute path a build-machine path (see common.json "$build_paths")."""

    source_extensions: frozenset[str]
    source_files: frozenset[str]
    build_dirs: tuple[str, ...]
    roots: tuple[str, ...]
    dependency_dirs: frozenset[str]
    toolchain_prefixes: tuple[str, ...]
    prebuilt_prefixes: tuple[str, ...] = ()
    max_dwarf_bytes: int = 256 << 20

    def classify(self, path: str) -> str | None:
        """'source' for a source/build-tree path, 'toolchain' for a toolchain or dependency header,
        'prebuilt' for a source of the toolchain's own prebuilt objects (the manylinux compilers' static
        libstdc++ parts, built in an RPM build root), None for anything else (a run-time file such as
        /proc/self/maps)."""
        if path.startswith(self.prebuilt_prefixes):
            return "prebuilt"
        parts = path.strip("/").split("/")
        if len(parts) < 2:
            return None
        name = parts[-1]
        stem, dot, extension = name.rpartition(".")
        source_file = (bool(dot) and bool(stem) and extension.lower() in self.source_extensions) or \
            name in self.source_files
        build_dir = self._build_dir_match
        build_tree = build_dir is not None and any(build_dir(p) for p in parts[:-1])
        rooted = self._root_match is not None and self._root_match(path) is not None
        if not (source_file or build_tree or rooted):
            return None
        if path.startswith(self.toolchain_prefixes) or not self.dependency_dirs.isdisjoint(parts[:-1]):
            return "toolchain"
        if source_file and "include" in parts[:-1] and (
                extension.lower() in _HEADER_EXTENSIONS or not (build_tree or rooted)):
            # A header in an include tree: a dependency's, wherever its root lies (a fetched LLVM, a package
            # cache under a home directory) -- unless the project's own sources sit beside that tree, which
            # check_build_paths decides from every path it found (include_root).
            return "toolchain"
        return "source"

    # fnmatchcase over each pattern, as one regex: classify runs for every path-like string of a library.
    @cached_property
    def _build_dir_match(self) -> Callable[[str], re.Match[str] | None] | None:
        return _any_glob(self.build_dirs)

    @cached_property
    def _root_match(self) -> Callable[[str], re.Match[str] | None] | None:
        return _any_glob([g for pattern in self.roots for g in (pattern + "/*", pattern)])

    @staticmethod
    def include_root(path: str) -> str | None:
        """The directory holding a header's include tree (/x/proj for /x/proj/include/proj/a.h)."""
        parts = path.split("/")
        if "include" not in parts[:-1]:
            return None
        return "/".join(parts[:len(parts) - 1 - parts[:-1][::-1].index("include") - 1])


@dataclass(frozen=True)
class Policy:
    name: str
    glibc: tuple[int, int]
    symbol_versions: dict[str, dict[str, VersionCeiling]]  # arch -> namespace (GLIBC, ...) -> ceiling
    system_libraries: frozenset[str]
    system_library_dirs: dict[str, tuple[str, ...]]
    interpreter_symbols: tuple[str, ...]
    exports: tuple[ExportRule, ...]
    build_paths: BuildPathRule
    torch_registration_symbols: tuple[str, ...]
    limits: Limits
    severity: dict[str, str]  # "check" or "check:finding" -> "error" / "warning"
    linker_defined_symbols: frozenset[str]
    torch_symbols: tuple[str, ...] = ()
    driver_libraries: dict[str, str] = field(default_factory=dict)  # DT_NEEDED name -> what installs it

    def is_torch_symbol(self, symbol: str) -> bool:
        return any(fnmatch.fnmatchcase(symbol, pattern) for pattern in self.torch_symbols)

    def ceilings(self, arch: str) -> dict[str, VersionCeiling]:
        if arch not in self.symbol_versions:
            raise AuditInputError(f"policy {self.name} has no symbol versions for {arch}")
        return self.symbol_versions[arch]

    def allowed_exports(self, member: str) -> tuple[str, ...] | None:
        """Symbol globs a non-extension library at `member` may export; None when no rule matches."""
        for rule in self.exports:
            if fnmatch.fnmatchcase(member, rule.library):
                return rule.symbols
        return None

    def severity_of(self, check_id: str, finding: str) -> str:
        """A finding's own entry, else its check's, else error."""
        if finding and f"{check_id}:{finding}" in self.severity:
            return self.severity[f"{check_id}:{finding}"]
        return self.severity.get(check_id, "error")

    def provided_by_interpreter(self, symbol: str) -> bool:
        return any(fnmatch.fnmatchcase(symbol, pattern) for pattern in self.interpreter_symbols)

    def is_registration_symbol(self, symbol: str) -> bool:
        return any(fnmatch.fnmatchcase(symbol, pattern) for pattern in self.torch_registration_symbols)


def parse_version(text: str) -> tuple[int, ...] | None:
    return tuple(int(p) for p in text.split(".")) if re.fullmatch(r"\d+(\.\d+)*", text) else None


def available_policies() -> list[str]:
    return sorted(p.stem for p in POLICY_DIR.glob("*.json") if p.stem != "common")


def _read(name: str) -> dict[str, Any]:
    if not _NAME_RE.match(name):
        raise AuditInputError(f"'{name}' is not a policy name (known: {', '.join(available_policies())})")
    path = POLICY_DIR / f"{name}.json"
    if not path.is_file():
        raise AuditInputError(f"no audit policy '{name}' in {POLICY_DIR} (known: {', '.join(available_policies())})")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AuditInputError(f"{path}: not a readable JSON policy: {exc}") from exc
    if not isinstance(data, dict) or data.get("name") != name:
        raise AuditInputError(f"{path}: a policy file must be an object whose name is '{name}'")
    base = data.pop("extends", None)
    if base is not None:
        merged = _read(str(base))
        merged.update(data)
        return merged
    return data


_CACHE: dict[str, Policy] = {}


def _severities(table: dict[str, str]) -> dict[str, str]:
    from .report import CHECK_IDS, SEVERITIES

    result = {}
    for key, value in table.items():
        if key.startswith("$"):
            continue
        if key.split(":", 1)[0] not in CHECK_IDS:
            raise ValueError(f"severity: '{key}' names no check (known: {', '.join(CHECK_IDS)})")
        if value not in SEVERITIES:
            raise ValueError(f"severity of '{key}': '{value}' is not one of {', '.join(SEVERITIES)}")
        result[key] = value
    return result


def load_policy(name: str) -> Policy:
    """Load data/audit_policy/<name>.json (with what it extends); AuditInputError when unusable."""
    if name in _CACHE:
        return _CACHE[name]
    data = _read(name)
    try:
        versions = {
            arch: {ns: VersionCeiling(parse_version(c["max"]) if c.get("max") else None, frozenset(c.get("also", ())))
                   for ns, c in table.items()}
            for arch, table in data["symbol_versions"].items()
        }
        policy = Policy(
            name=name,
            glibc=(int(data["glibc"][0]), int(data["glibc"][1])),
            symbol_versions=versions,
            system_libraries=frozenset(data["system_libraries"]),
            system_library_dirs={k: tuple(v) for k, v in data["system_library_dirs"].items()},
            interpreter_symbols=tuple(data["interpreter_symbols"]),
            exports=tuple(ExportRule(r["library"], tuple(r["symbols"]), r.get("why", "")) for r in data["exports"]),
            build_paths=BuildPathRule(
                source_extensions=frozenset(e.lower() for e in data["build_paths"]["source_extensions"]),
                source_files=frozenset(data["build_paths"]["source_files"]),
                build_dirs=tuple(data["build_paths"]["build_dirs"]),
                roots=tuple(data["build_paths"]["roots"]),
                dependency_dirs=frozenset(data["build_paths"]["dependency_dirs"]),
                toolchain_prefixes=tuple(data["build_paths"]["toolchain_prefixes"]),
                prebuilt_prefixes=tuple(data["build_paths"]["prebuilt_prefixes"]),
                max_dwarf_bytes=int(data["build_paths"]["max_dwarf_bytes"])),
            torch_registration_symbols=tuple(data["torch_registration_symbols"]),
            limits=Limits(**data["limits"]),
            severity=_severities(data["severity"]),
            linker_defined_symbols=frozenset(data["linker_defined_symbols"]),
            torch_symbols=tuple(data["torch_symbols"]),
            driver_libraries={str(k): str(v) for k, v in data["driver_libraries"].items()},
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise AuditInputError(f"audit policy '{name}' is malformed: {exc!r}") from exc
    _CACHE[name] = policy
    return policy


def manylinux_policy_of_tag(platform_tag: str) -> tuple[str, str] | None:
    """'manylinux_2_34_x86_64' -> ('manylinux_2_34', 'x86_64'); None for tags that make no manylinux claim."""
    for legacy, modern in _LEGACY_TAGS.items():
        if platform_tag.startswith(legacy + "_"):
            return modern, platform_tag[len(legacy) + 1:]
    match = _MANYLINUX_RE.match(platform_tag)
    if match is None:
        return None
    return f"manylinux_{match[1]}_{match[2]}", match[3]


def glibc_of_policy_name(name: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)", name)
    return (int(match[1]), int(match[2])) if match else None
