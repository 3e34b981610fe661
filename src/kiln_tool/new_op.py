"""`kiln new-op NAME`: the files of a new op, from the templates in kiln_tool/templates/new_op/.

What it writes is what docs/adding-an-op.md walks through:
  ops/NAME/NAME.h, NAME_cpu.cpp, NAME_cuda.cu   the kernel core (raw pointers, no torch header)
  ops/NAME/binding.cpp                           schema, checks, registrations (both ABI modes)
  python/opkiln/ops.py                           + a section: typed wrapper, register_fake,
                                                   register_autograd (raises until a backward is
                                                   written), and NAME in __all__
  tests/ops/test_NAME.py                         reference, opcheck and bad-input tests
No registry line: the build finds an op by its ops/NAME/binding.cpp. The skeleton builds; its
kernels write NaN, so its test fails until the kernel (and the reference) are written.

A bad NAME, or one that is taken, is refused before anything is written; the files are written
all or none.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).resolve().parent / "templates" / "new_op"

# snake_case: lower-case words of letters and digits joined by single underscores.
_NAME_RE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_NAME_LENGTH = 64

def _cxx_keywords() -> frozenset[str]:
    lines = (TEMPLATES / "cxx_keywords.txt").read_text().splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


CXX_KEYWORDS = _cxx_keywords()

# Folders of ops/ that are not ops, and names the binding's namespace or the facade already use.
RESERVED = frozenset({"common", "facade", "kernels", "opkiln", "ops", "torch", "stable", "cuda", "cpu", "at", "c10",
                      "std"})


class NewOpError(ValueError):
    """The name cannot be used (exit 2); nothing was written."""


@dataclass(frozen=True)
class Plan:
    """Every file the op needs: new files and the new text of python/opkiln/ops.py."""

    root: Path
    name: str
    new_files: dict[Path, str]
    ops_py: Path
    ops_py_text: str


def existing_ops(root: Path) -> set[str]:
    """Names of every op in the tree: op folders and the ops their bindings define."""
    names = {p.parent.name for p in (root / "ops").glob("*/binding.cpp")}
    for binding in (root / "ops").glob("*/binding.cpp"):
        names.update(re.findall(r'\bm\.def\(\s*"([A-Za-z_][A-Za-z0-9_]*)', binding.read_text()))
    return names


def _module_names(source: str) -> set[str]:
    """Top-level names a Python module binds (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def validate_name(name: str, root: Path) -> None:
    if not _NAME_RE.fullmatch(name):
        raise NewOpError(f"{name!r} is not a snake_case name (lower-case letters and digits, words joined by "
                         f"single underscores, starting with a letter)")
    if len(name) > MAX_NAME_LENGTH:
        raise NewOpError(f"{name!r} is longer than {MAX_NAME_LENGTH} characters")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise NewOpError(f"{name!r} is a Python keyword")
    if name in CXX_KEYWORDS:
        raise NewOpError(f"{name!r} is a C++ keyword")
    if name in RESERVED:
        raise NewOpError(f"{name!r} is reserved (a folder of ops/ or a namespace the bindings use)")
    if name in existing_ops(root):
        raise NewOpError(f"an op named {name!r} exists already")
    taken = [str(p.relative_to(root)) for p in (root / "ops" / name, root / "tests" / "ops" / f"test_{name}.py")
             if p.exists()]
    if taken:
        raise NewOpError(f"{', '.join(taken)} exists already")
    ops_py = root / "python" / "opkiln" / "ops.py"
    if name in _module_names(ops_py.read_text()):
        raise NewOpError(f"python/opkiln/ops.py already defines {name!r}")


def _render(template: str, name: str) -> str:
    return Template((TEMPLATES / template).read_text()).substitute(op=name)


def _add_to_all(source: str, name: str) -> str:
    match = re.search(r"^__all__ = \[([^\]]*)\]$", source, re.MULTILINE)
    if match is None:
        raise NewOpError("python/opkiln/ops.py has no one-line __all__ = [...] to add the op to")
    names = sorted({*re.findall(r'"([^"]+)"', match.group(1)), name})
    line = "__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]"
    return source[:match.start()] + line + source[match.end():]


def plan(name: str, root: Path) -> Plan:
    """Validates `name` and renders every file; writes nothing."""
    root = root.resolve()
    if not (root / "ops" / "facade" / "facade.h").is_file() or not (root / "python" / "opkiln" / "ops.py").is_file():
        raise NewOpError(f"{root} is not an opkiln checkout (no ops/facade/facade.h or python/opkiln/ops.py)")
    validate_name(name, root)
    folder = root / "ops" / name
    new_files = {
        folder / f"{name}.h": _render("op.h.tmpl", name),
        folder / f"{name}_cpu.cpp": _render("op_cpu.cpp.tmpl", name),
        folder / f"{name}_cuda.cu": _render("op_cuda.cu.tmpl", name),
        folder / "binding.cpp": _render("binding.cpp.tmpl", name),
        root / "tests" / "ops" / f"test_{name}.py": _render("test_op.py.tmpl", name),
    }
    ops_py = root / "python" / "opkiln" / "ops.py"
    text = _add_to_all(ops_py.read_text(), name).rstrip("\n") + "\n" + _render("ops_section.py.tmpl", name)
    return Plan(root, name, new_files, ops_py, text)


def write(p: Plan) -> list[Path]:
    """Writes the plan, all or nothing; returns the paths written or changed."""
    created: list[Path] = []
    folder = p.root / "ops" / p.name
    original = p.ops_py.read_text()
    try:
        folder.mkdir()
        for path, text in p.new_files.items():
            with path.open("x") as fh:  # never overwrite
                created.append(path)
                fh.write(text)
        tmp = p.ops_py.with_name(p.ops_py.name + ".new-op.tmp")
        tmp.write_text(p.ops_py_text)
        tmp.replace(p.ops_py)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        p.ops_py.with_name(p.ops_py.name + ".new-op.tmp").unlink(missing_ok=True)
        if p.ops_py.read_text() != original:
            p.ops_py.write_text(original)
        raise
    return [*p.new_files, p.ops_py]
