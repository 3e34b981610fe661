"""Write the build info that ships inside every wheel as opkiln/_build_info.json.

Called by CMake at configure time (cmake/OpkilnBuildInfo.cmake). The document
holds no absolute path and no time stamp, so it never breaks reproducibility.
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

BUILD_INFO_SCHEMA = 1
DEFAULT_INDEX_URL = "https://opkiln.github.io/wheels"

# What a wheel is built from; the source hash covers exactly these.
SOURCE_ROOTS = ("CMakeLists.txt", "VERSION", "pyproject.toml", "cmake", "data", "ops", "python/opkiln",
                "src/kiln_tool")
_SKIP_PARTS = {"__pycache__", ".mypy_cache", ".ruff_cache"}
_SKIP_NAMES = {"_build_info.json"}

_DEF_RE = re.compile(r'\bm\.def\(\s*"([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z0-9_]+)?\(')


def op_manifest(schema_files: list[Path], namespace: str = "opkiln") -> list[str]:
    """Qualified names of every op defined (m.def) in the schema files, sorted."""
    names: set[str] = set()
    for path in schema_files:
        names.update(f"{namespace}::{name}" for name in _DEF_RE.findall(path.read_text()))
    if not names:
        raise ValueError(f"no m.def(...) found in {', '.join(map(str, schema_files))}")
    return sorted(names)


def op_bindings(source_dir: Path, ops: list[str] | None = None) -> list[Path]:
    """The binding source of each op (ops/<op>/binding.cpp: what makes a folder an op, see
    ops/CMakeLists.txt), sorted; `ops` (the build's list) or every op folder of the tree."""
    if ops is None:
        return sorted(source_dir.glob("ops/*/binding.cpp"))
    paths = [source_dir / "ops" / op / "binding.cpp" for op in sorted(ops)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"no binding source: {', '.join(missing)}")
    return paths


def source_files(source_dir: Path) -> list[Path]:
    files: list[Path] = []
    for root in SOURCE_ROOTS:
        path = source_dir / root
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            for candidate in path.rglob("*"):
                rel = candidate.relative_to(source_dir)
                if candidate.is_file() and not (_SKIP_PARTS & set(rel.parts)) and candidate.name not in _SKIP_NAMES \
                        and candidate.suffix not in {".pyc", ".so"}:
                    files.append(candidate)
    return sorted(files, key=lambda p: p.relative_to(source_dir).as_posix())


def source_hash(source_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in source_files(source_dir):
        rel = path.relative_to(source_dir).as_posix()
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def git_commit(source_dir: Path) -> str:
    override = os.environ.get("KILN_GIT_COMMIT")
    if override:
        return override
    try:
        out = subprocess.run(["git", "-C", str(source_dir), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def python_tag(abi_mode: str) -> str:
    if abi_mode == "stable":
        return "cp310-abi3"
    impl = "cp" if sys.implementation.name == "cpython" else sys.implementation.name
    return f"{impl}{sys.version_info.major}{sys.version_info.minor}"


def _split_flags(flags: str) -> list[str]:
    return [f for f in flags.split() if f]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--source-dir", type=Path, required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--torch-version", required=True)
    p.add_argument("--abi-mode", choices=("torch", "stable"), default="torch")
    p.add_argument("--cxx11-abi", choices=("0", "1"), required=True)
    p.add_argument("--cxx-standard", type=int, required=True)
    p.add_argument("--compiler", required=True)
    p.add_argument("--cxx-flags", default="")
    p.add_argument("--cmake-version", default="")
    p.add_argument("--extension-suffix", default="")
    p.add_argument("--ops", required=True, help="the ops the build found (ops/<op>/binding.cpp), space-separated")
    p.add_argument("--torch-min", default=None, help="stable ABI: the oldest torch the wheel loads on")
    p.add_argument("--cuda", default=None)
    p.add_argument("--nvcc-version", default=None)
    p.add_argument("--cuda-archs", default="")
    p.add_argument("--cuda-flags", default="")
    p.add_argument("--index-url", default=os.environ.get("OPKILN_INDEX_URL", DEFAULT_INDEX_URL))
    args = p.parse_args(argv)
    if args.abi_mode == "stable" and not args.torch_min:
        p.error("--abi-mode stable needs --torch-min")

    source_dir = args.source_dir.resolve()
    cuda_tag = "cpu" if not args.cuda else "cu" + args.cuda.replace(".", "")
    archs = [a for a in re.split(r"[;, ]+", args.cuda_archs) if a]
    info = {
        "schema": BUILD_INFO_SCHEMA,
        "opkiln_version": args.version,
        "abi_mode": args.abi_mode,
        "torch_version": args.torch_version,
        "torch_major_minor": ".".join(args.torch_version.split("+")[0].split(".")[:2]),
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
        "source_hash": source_hash(source_dir),
        "ops": op_manifest(op_bindings(source_dir, args.ops.split())),
        "index_url": args.index_url,
    }
    if args.abi_mode == "stable":
        info["torch_min"] = args.torch_min
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    tmp.replace(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
