"""Write the build info that ships inside every wheel as <package>/_build_info.json.

Called by CMake at configure time (kiln's CMake package, KilnBuildInfo.cmake), and by `kiln wheels` for
a wheel the project's own backend built (backend_build_info). The document holds no absolute path and
no time stamp, so it never breaks reproducibility. Its keys: schema, project, package, namespace, build,
libraries, version (the wheel's, with its local label), the torch, CUDA, compiler and flags it was built
with, git_commit, source_hash, ops (the op manifest), index_url, targets (what the import guard loads:
"<path in the wheel without suffix>=<python-module|load-library>", in load order).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from .project import KilnProject, ProjectError, load_project
from .torch_probe import TorchInstall
from .variant import BuildVariant

BUILD_INFO_SCHEMA = 1
GUARD_DIR = Path(__file__).resolve().parent / "guard"
GUARD_FOLDER = "_kiln"
"""The import guard template (kiln_tool/guard) and the folder of the package it is generated into."""

# What the source hash never covers when the project is not a git work tree (an export, an sdist): build
# outputs, venvs and caches kiln and the usual tools write inside a project.
_SKIP_PARTS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".git", ".hypothesis"}
_SKIP_TOP = {"build", "dist", ".venv", ".venvs", ".tools", "wheelhouse", ".eggs"}
_SKIP_NAMES = {"_build_info.json"}
_MAX_SOURCE_FILES = 100_000

_DEF_RE = re.compile(r'\bm\.def\(\s*"([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z0-9_]+)?\(')


def op_manifest(schema_files: list[Path], namespace: str) -> list[str]:
    """Qualified names of every op defined (m.def) in the schema files, sorted."""
    names: set[str] = set()
    for path in schema_files:
        names.update(f"{namespace}::{name}" for name in _DEF_RE.findall(path.read_text()))
    if not names:
        raise ValueError(f"no m.def(...) found in {', '.join(map(str, schema_files))}")
    return sorted(names)


def op_bindings(source_dir: Path, ops: list[str] | None = None) -> list[Path]:
    """An ops/<op>/binding.cpp tree's binding sources (the layout `kiln new-op` writes: a folder is an op
    when it holds binding.cpp), sorted; `ops` (the build's list) or every op folder of the tree."""
    if ops is None:
        return sorted(source_dir.glob("ops/*/binding.cpp"))
    paths = [source_dir / "ops" / op / "binding.cpp" for op in sorted(ops)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"no binding source: {', '.join(missing)}")
    return paths


def schema_sources(project: KilnProject, patterns: tuple[str, ...] | None = None) -> list[Path]:
    """The files the ``patterns`` (default: the project's schema-sources) match, sorted and unique: regular
    files inside the project only. A match that leaves it (through ``..`` or a symlink) is refused."""
    found: set[Path] = set()
    root = project.root.resolve()
    for pattern in project.schema_sources if patterns is None else patterns:
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise ValueError(f"tool.kiln.schema-sources: {pattern!r} lies outside the project")
        matches = [p for p in project.root.glob(pattern) if p.is_file()]
        escaping = [p for p in matches if not p.resolve().is_relative_to(root)]
        if escaping:
            raise ValueError(f"tool.kiln.schema-sources: {pattern!r} matches {escaping[0]}, which leads outside "
                             f"the project (a symlink to {escaping[0].resolve()})")
        if not matches:
            raise ValueError(f"tool.kiln.schema-sources: {pattern!r} matches no file in {project.root}")
        found.update(matches)
    return sorted(found)


def _tracked(source_dir: Path) -> list[str] | None:
    """The files git tracks under source_dir, or None when it is not a git work tree."""
    try:
        out = subprocess.run(["git", "-C", str(source_dir), "ls-files", "-z", "--", "."], capture_output=True,
                             check=True, timeout=30)
        top = subprocess.run(["git", "-C", str(source_dir), "rev-parse", "--show-prefix"], capture_output=True,
                             text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    prefix = top.stdout.strip()
    names = [n.decode("utf-8", "surrogateescape") for n in out.stdout.split(b"\0") if n]
    return [n[len(prefix):] if prefix and n.startswith(prefix) else n for n in names]


def source_files(source_dir: Path) -> list[Path]:
    """What a wheel is built from: the files git tracks in the project, or (not a git work tree) every file
    under it but build outputs, venvs and caches. Sorted by relative path."""
    tracked = _tracked(source_dir)
    if tracked is not None:
        files = [source_dir / name for name in tracked]
    else:
        files = []
        for candidate in source_dir.rglob("*"):
            rel = candidate.relative_to(source_dir)
            if rel.parts[0] in _SKIP_TOP or rel.parts[0].startswith((".venv", "wheelhouse")):
                continue
            if candidate.is_file() and not candidate.is_symlink():
                files.append(candidate)
            if len(files) > _MAX_SOURCE_FILES:
                raise ValueError(f"{source_dir}: more than {_MAX_SOURCE_FILES} source files")
    kept = []
    for path in files:
        rel = path.relative_to(source_dir)
        if (_SKIP_PARTS & set(rel.parts)) or path.name in _SKIP_NAMES or path.suffix in {".pyc", ".so"}:
            continue
        if tracked is None and any(part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue  # setuptools writes <name>.egg-info/ into the project while it builds
        if path.is_file():
            kept.append(path)
    return sorted(kept, key=lambda p: p.relative_to(source_dir).as_posix())


def source_hash(source_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in source_files(source_dir):
        rel = path.relative_to(source_dir).as_posix()
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def git_commit(source_dir: Path) -> str:
    """$KILN_GIT_COMMIT (a build from an export without .git), else the project's HEAD, else "unknown"."""
    override = os.environ.get("KILN_GIT_COMMIT")
    if override:
        return override
    try:
        out = subprocess.run(["git", "-C", str(source_dir), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def _kiln_output(rel: str) -> bool:
    """A path of what kiln and the build write into the project (build/, dist/, venvs, caches): never a change."""
    parts = Path(rel).parts
    return not parts or parts[0] in _SKIP_TOP or parts[0].startswith((".venv", "wheelhouse")) \
        or bool(_SKIP_PARTS & set(parts)) or parts[-1] in _SKIP_NAMES or parts[0].endswith(".egg-info")


def git_dirty(source_dir: Path) -> bool | None:
    """Whether the project's tree differs from its commit: a tracked file changed, added or deleted, or a file
    git does not ignore and does not track yet (a new kernel the build may compile). What kiln and the build
    write (build/, dist/, venvs, caches) does not count. $KILN_GIT_DIRTY ("1"/"0") beside $KILN_GIT_COMMIT
    speaks for an export without .git; None when nothing can tell."""
    if os.environ.get("KILN_GIT_COMMIT"):
        flag = os.environ.get("KILN_GIT_DIRTY", "").strip()
        return {"1": True, "0": False}.get(flag)
    try:
        out = subprocess.run(["git", "-C", str(source_dir), "status", "--porcelain=v1", "-z", "--untracked-files=all",
                              "--", "."], capture_output=True, check=True, timeout=60)
        top = subprocess.run(["git", "-C", str(source_dir), "rev-parse", "--show-prefix"], capture_output=True,
                             text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    prefix = top.stdout.strip()
    entries = out.stdout.decode("utf-8", "surrogateescape").split("\0")
    changed, i = [], 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        if entry[0] in "RC":
            i += 1  # a rename's or copy's source path follows it
        name = entry[3:]
        changed.append(name[len(prefix):] if prefix and name.startswith(prefix) else name)
    return any(not _kiln_output(name) for name in changed)


def python_tag(abi_mode: str) -> str:
    if abi_mode == "stable":
        return "cp310-abi3"
    impl = "cp" if sys.implementation.name == "cpython" else sys.implementation.name
    return f"{impl}{sys.version_info.major}{sys.version_info.minor}"


def _split_flags(flags: str) -> list[str]:
    return [f for f in flags.split() if f]


def project_fields(project: KilnProject) -> dict[str, Any]:
    """What the build info says of the project itself (the same in every build of it)."""
    return {"project": project.name, "package": project.package, "namespace": project.namespace,
            "build": project.build, "libraries": project.libraries, "index_url": project.index_url}


TARGET_KINDS = ("python-module", "load-library")
_TARGET_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")


def parse_targets(text: str) -> list[str]:
    """``opkiln/_C=python-module other/_x=load-library`` -> the build info's ``targets`` (order kept)."""
    targets = []
    for item in text.split():
        path, _, kind = item.partition("=")
        if not _TARGET_RE.fullmatch(path) or kind not in TARGET_KINDS:
            raise ValueError(f"--targets: {item!r} is not <path in the wheel>=<{'|'.join(TARGET_KINDS)}>")
        targets.append(f"{path}={kind}")
    return targets


def library_targets(package: str, kind: str, members: list[str]) -> list[str]:
    """The ``targets`` of a wheel another backend built: each compiled library of ``package`` in the wheel's
    member list (``twinlibs/_axpy.cpython-311-x86_64-linux-gnu.so`` -> ``twinlibs/_axpy=load-library``), sorted."""
    found = set()
    for member in members:
        folder, _, name = member.rpartition("/")
        stem = name.split(".", 1)[0]
        if (folder == package or folder.startswith(f"{package}/")) and (name.endswith(".so") or ".so." in name) \
                and _TARGET_RE.fullmatch(f"{folder}/{stem}") and not folder.startswith(f"{package}/_kiln"):
            found.add(f"{folder}/{stem}={kind}")
    return sorted(found)


def guard_files() -> dict[str, bytes]:
    """Every .py of the import guard template, by file name: what goes into ``<package>/_kiln/`` verbatim."""
    files = {p.name: p.read_bytes() for p in sorted(GUARD_DIR.glob("*.py")) if p.is_file()}
    if "guard.py" not in files:
        raise FileNotFoundError(f"{GUARD_DIR}: kiln's import guard is missing (a broken kiln install)")
    return files


def torch_major_minor(torch_version: str) -> str:
    return ".".join(torch_version.split("+")[0].split(".")[:2])


def write_build_info(info: dict[str, Any], output: Path) -> None:
    """Sorted keys, two-space indent, a final newline; replaced atomically."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(render(info))
    tmp.replace(output)


def render(info: dict[str, Any]) -> str:
    return json.dumps(info, indent=2, sort_keys=True) + "\n"


def backend_build_info(project: KilnProject, torch: TorchInstall, variant: BuildVariant, python: str,
                       commit: str | None = None, ops: list[str] | None = None) -> dict[str, Any]:
    """The build info kiln adds to a wheel the project's own backend built: what kiln knows of that build
    (the torch and variant of its build venv, the Python, the sources, the op manifest: ``ops``, what the
    built libraries registered once loaded, else the m.def(...) of schema-sources).
    The compiler, its flags and the CUDA archs were the backend's choice: they are left out, not guessed;
    the audit reads the binaries themselves."""
    if ops is None:
        ops = op_manifest(schema_sources(project), project.namespace) if project.schema_sources else []
    return {
        "schema": BUILD_INFO_SCHEMA,
        **project_fields(project),
        "version": "",  # set by kiln_tool.relabel to the labelled version
        "abi_mode": variant.mode,
        "torch_version": torch.version,
        "torch_major_minor": torch_major_minor(torch.version),
        "cuda": variant.cuda,
        "cuda_tag": variant.cuda_tag,
        "cuda_archs": [],
        "cxx11_abi": torch.cxx11_abi,
        "python_tag": "cp" + python.replace(".", ""),
        "platform": sys.platform,
        "git_commit": commit or git_commit(project.root),
        "git_dirty": git_dirty(project.root),
        "source_hash": source_hash(project.root),
        "ops": ops,
        "targets": None,  # kiln_tool.relabel lists the compiled libraries of the backend's wheel here
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--source-dir", type=Path, required=True, help="the project's folder (its [tool.kiln])")
    p.add_argument("--version", required=True)
    p.add_argument("--torch-version", required=True)
    p.add_argument("--abi-mode", choices=("torch", "stable"), default="torch")
    p.add_argument("--cxx11-abi", choices=("0", "1"), required=True)
    p.add_argument("--cxx-standard", type=int, required=True)
    p.add_argument("--compiler", required=True)
    p.add_argument("--cxx-flags", default="")
    p.add_argument("--cmake-version", default="")
    p.add_argument("--extension-suffix", default="")
    p.add_argument("--schema-sources", required=True, help="the sources whose m.def(...) define the ops (';' or "
                                                           "space separated, relative to --source-dir or absolute)")
    p.add_argument("--targets", default="", help="the libraries, '<path>=<kind>' separated by spaces (kiln's "
                                                  "CMake: every kiln_add_torch_library())")
    p.add_argument("--torch-min", default=None, help="stable ABI: the oldest torch the wheel loads on")
    p.add_argument("--cuda", default=None)
    p.add_argument("--nvcc-version", default=None)
    p.add_argument("--cuda-archs", default="")
    p.add_argument("--cuda-flags", default="")
    args = p.parse_args(argv)
    if args.abi_mode == "stable" and not args.torch_min:
        p.error("--abi-mode stable needs --torch-min")

    source_dir = args.source_dir.resolve()
    try:
        project = load_project(source_dir)
        files = [source_dir / f for f in re.split(r"[; ]+", args.schema_sources) if f]
        ops = op_manifest(files, project.namespace)
        targets = parse_targets(args.targets)
    except (ProjectError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cuda_tag = "cpu" if not args.cuda else "cu" + args.cuda.replace(".", "")
    archs = [a for a in re.split(r"[;, ]+", args.cuda_archs) if a]
    info = {
        "schema": BUILD_INFO_SCHEMA,
        **project_fields(project),
        "version": args.version,
        "abi_mode": args.abi_mode,
        "torch_version": args.torch_version,
        "torch_major_minor": torch_major_minor(args.torch_version),
        "cuda": args.cuda or None,
        "cuda_tag": cuda_tag,
        "cuda_archs": archs,
        "cxx11_abi": args.cxx11_abi == "1",
        "cxx_standard": args.cxx_standard,
        "compiler": args.compiler,
        "nvcc_version": args.nvcc_version or None,
        "cmake_version": args.cmake_version,
        "flags": {"cxx": _split_flags(args.cxx_flags), "cuda": _split_flags(args.cuda_flags)},
        "python_tag": python_tag(args.abi_mode),
        "extension_suffix": args.extension_suffix,
        "platform": sys.platform,
        "git_commit": git_commit(source_dir),
        "git_dirty": git_dirty(source_dir),
        "source_hash": source_hash(source_dir),
        "ops": ops,
        "targets": targets,
    }
    if args.abi_mode == "stable":
        info["torch_min"] = args.torch_min
    write_build_info(info, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
