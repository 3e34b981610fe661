"""Where an op's code may live, measured on the working tree (docs/adding-an-op.md).

An op is its folder: ops/<op>/ holds its binding and its kernel cores. Three rules:

- own code in its folder: a file of ops/<op>/ includes from its own folder, ops/common/ and
  ops/facade/ only, never another op's files (what two ops share moves to ops/common/);
- shared code is shared: ops/common/ and ops/facade/ include no op's file and name no op in
  their code (comments may name the ops that use them);
- no second list: outside an op's folder no file names the op but its Python wrapper module
  (python/opkiln/ops.py), the tests, the benchmarks and prose (Markdown): adding the folder is
  all the build, the op manifest and the import need.

The walk reads every file of the tree, tracked by git or not (an op not yet added is checked
too), and leaves out what .gitignore ignores. Each violation is one line `path:line: why`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Where naming an op is the point: its wrapper module, tests, benchmarks, prose.
NAMING_ALLOWED = ("python/opkiln/ops.py",)
NAMING_ALLOWED_TREES = ("tests", "benchmarks", "docs")
SHARED_FOLDERS = ("common", "facade")
_DEF = re.compile(r'\bm\.def\(\s*"([A-Za-z_][A-Za-z0-9_]*)')
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/[^"]*"')
_LINE_COMMENT = re.compile(r"//.*$")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


@dataclass(frozen=True)
class Violation:
    path: str  # relative to the tree
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}"


def op_names(root: Path) -> dict[str, str]:
    """Every op name (folder names and the names their bindings m.def) -> its op folder."""
    names: dict[str, str] = {}
    for binding in sorted((root / "ops").glob("*/binding.cpp")):
        op = binding.parent.name
        names[op] = op
        for defined in _DEF.findall(binding.read_text(encoding="utf-8")):
            names[defined] = op
    return names


def _ignore_rules(root: Path) -> tuple[set[str], set[str], set[str]]:
    """(top-level paths, folder names anywhere, file suffixes) that .gitignore's simple patterns ignore."""
    anchored: set[str] = {".git"}
    anywhere: set[str] = set()
    suffixes: set[str] = set()
    ignore = root / ".gitignore"
    for raw in ignore.read_text(encoding="utf-8").splitlines() if ignore.is_file() else []:
        entry = raw.strip()
        if not entry or entry.startswith(("#", "!")):
            continue
        if entry.startswith("*."):
            suffixes.add(entry[1:])
        elif entry.startswith("/"):
            anchored.add(entry.strip("/"))
        else:
            anywhere.add(entry.strip("/"))
    return anchored, anywhere, suffixes


def tree_files(root: Path) -> Iterator[Path]:
    """Every text file of the tree but what .gitignore ignores, in a stable order."""
    anchored, anywhere, suffixes = _ignore_rules(root)

    def ignored(rel: str, name: str) -> bool:
        return rel in anchored or name in anywhere or any(
            re.fullmatch(pattern.replace("*", ".*"), rel) for pattern in anchored if "*" in pattern)

    def walk(folder: Path) -> Iterator[Path]:
        for entry in sorted(folder.iterdir()):
            rel = entry.relative_to(root).as_posix()
            if ignored(rel, entry.name) or entry.is_symlink():
                continue
            if entry.is_dir():
                yield from walk(entry)
            elif entry.suffix not in suffixes:
                yield entry

    yield from walk(root)


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary: not code that could list an op


def _code_lines(text: str) -> list[str]:
    """C/C++/CUDA source lines with comments blanked (line numbers kept)."""
    text = _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [_LINE_COMMENT.sub("", line) for line in text.splitlines()]


def violations(root: Path) -> list[Violation]:
    names = op_names(root)
    ops = set(names.values())
    word = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b")
    found: list[Violation] = []
    for path in tree_files(root):
        rel = path.relative_to(root)
        text = _text(path)
        if text is None:
            continue
        parts = rel.parts
        in_ops = parts[0] == "ops" and len(parts) > 2
        folder = parts[1] if in_ops else None
        lines = text.splitlines()
        if folder is not None and path.suffix in {".h", ".cuh", ".cpp", ".cu", ".hpp"}:
            for number, line in enumerate(lines, start=1):
                match = _INCLUDE.match(line)
                if match is None:
                    continue
                target = match.group(1)
                if folder in ops and target in ops and target != folder:
                    found.append(Violation(rel.as_posix(), number,
                                           f'includes "{target}/..." of op {target}: an op\'s code lives in its '
                                           f"folder; move what both ops use to ops/common/"))
                elif folder in SHARED_FOLDERS and target in ops:
                    found.append(Violation(rel.as_posix(), number,
                                           f'includes "{target}/..." of op {target}: ops/{folder}/ is shared and '
                                           f"depends on no op"))
            if folder in SHARED_FOLDERS:
                for number, line in enumerate(_code_lines(text), start=1):
                    if not _INCLUDE.match(line) and (m := word.search(line)) is not None:
                        found.append(Violation(rel.as_posix(), number,
                                               f"names op {m.group(1)} in code: ops/{folder}/ is shared by every "
                                               f"op and names none (a comment may)"))
            continue
        if folder in ops or parts[0] in NAMING_ALLOWED_TREES or rel.as_posix() in NAMING_ALLOWED \
                or path.suffix == ".md":
            continue
        for number, line in enumerate(lines, start=1):
            if (m := word.search(line)) is not None:
                op = names[m.group(1)]
                found.append(Violation(rel.as_posix(), number,
                                       f"names op {m.group(1)} outside ops/{op}/ and python/opkiln/ops.py: a second "
                                       f"list of ops (the build, the op manifest and the import find ops by their "
                                       f"folders)"))
    return found
