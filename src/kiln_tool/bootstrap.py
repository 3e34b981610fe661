"""Run kiln under a Python that has what the command needs, or say in one line how to get it.

`scripts/kiln` calls run_kiln() before it imports any other part of kiln. The modules a
command needs are read from the source: the third-party imports of the command's module
and of every kiln_tool module it imports, lazily or not (TYPE_CHECKING blocks aside). So
`kiln matrix` and `kiln venv` (which makes the repo venv), standard library only, run on a
bare CI Python, while `kiln audit` without pyelftools does not start half-way. When the running Python lacks
one of them, kiln re-executes itself under the repo's development venv
(`.venv/bin/python` beside `scripts/`) if that exists and is not the running
interpreter; otherwise it prints one line and exits 2 (unusable environment), never a
ModuleNotFoundError traceback. A Python older than kiln's syntax allows is treated the
same way. Standard library only.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

PACKAGE = "kiln_tool"

# Every third-party module kiln_tool imports (requirements/kiln.txt pins their
# distributions; tests/kiln/test_bootstrap.py keeps this equal to the source scan). When
# all are importable, kiln skips the scan: the common case costs one find_spec call per module.
KNOWN_THIRD_PARTY: tuple[str, ...] = ("elftools", "fastjsonschema", "packaging", "rich", "zstandard")

# Set in the environment of the re-executed kiln, so that a venv which lacks the modules
# too gets the one-line message instead of a loop.
REEXEC_MARKER = "KILN_KILN_REEXEC"

EXIT_ENVIRONMENT = 2

# kiln's own syntax needs this (pyproject.toml requires-python); an older Python is
# handled like a missing module. This module itself parses on Python 3.7+.
MIN_PYTHON = (3, 10)


def _module_file(source_dir: Path, name: str) -> tuple[Path, bool] | None:
    """(source file, is a package) of module `name` under source_dir (src/), or None."""
    base = source_dir.joinpath(*name.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _handles_import_errors(node: ast.Try) -> bool:
    """An optional import: `try: import x` with a handler for ImportError/ModuleNotFoundError
    (the code says itself what it does without the module)."""
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(k, ast.Name) and k.id in _IMPORT_ERRORS for k in kinds):
            return True
    return False


def _version_test(test: ast.expr) -> bool | None:
    """The value of `sys.version_info >= (X, Y)` (or <, <=, >) on this Python; None for any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Attribute)
            and test.left.attr == "version_info" and isinstance(test.left.value, ast.Name)
            and test.left.value.id == "sys"):
        return None
    try:
        wanted = ast.literal_eval(test.comparators[0])
    except ValueError:
        return None
    if not isinstance(wanted, tuple):
        return None
    compare = {ast.GtE: tuple.__ge__, ast.Gt: tuple.__gt__, ast.Lt: tuple.__lt__, ast.LtE: tuple.__le__}
    op = compare.get(type(test.ops[0]))
    return None if op is None else bool(op(tuple(sys.version_info[:len(wanted)]), wanted))


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        version = _version_test(child.test) if isinstance(child, ast.If) else None
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            others: list[ast.AST] = list(child.orelse)
        elif isinstance(child, ast.If) and version is not None:
            # A version switch (tomllib / tomli): only the branch this Python takes imports anything.
            others = list(child.body if version else child.orelse)
        elif isinstance(child, ast.Try) and _handles_import_errors(child):
            # The imports of its body are optional; what runs without them still counts.
            others = [*child.handlers, *child.orelse, *child.finalbody,
                      *(stmt for stmt in child.body if not isinstance(stmt, ast.Import | ast.ImportFrom))]
        else:
            yield child
            yield from _runtime_nodes(child)
            continue
        for other in others:
            yield other
            yield from _runtime_nodes(other)


def _imported_names(tree: ast.AST, package: str) -> Iterator[str]:
    """Every module name an import statement may load (from-imports: the module and each
    name as a possible submodule); relative imports resolved against `package`."""
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def third_party_imports(source_dir: Path, roots: Sequence[str]) -> set[str]:
    """Top-level names of the non-standard-library modules that `roots` (kiln_tool modules)
    import, directly or through other kiln_tool modules."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        located = _module_file(source_dir, name)
        if located is None:
            continue  # a name imported from a module, not a submodule
        path, is_package = located
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        package = name if is_package else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for imported in _imported_names(tree, package):
            top = imported.partition(".")[0]
            if top == PACKAGE:
                todo.append(imported)
            elif top and top != "__future__" and top not in sys.stdlib_module_names:
                found.add(top)
    return found


def command_modules(argv: Sequence[str]) -> list[str]:
    """The kiln_tool modules `kiln ARGV` loads: the CLI and the named command's module, or
    every command's module when no known command is named (the full --help)."""
    from kiln_tool.cli import COMMANDS, command_name  # standard library only

    named = command_name(list(argv))
    chosen = [named] if named is not None else list(COMMANDS)
    return [f"{PACKAGE}.cli", *(f"{PACKAGE}.commands.{COMMANDS[c]}" for c in chosen)]


def missing_modules(modules: Sequence[str]) -> list[str]:
    return sorted(m for m in modules if importlib.util.find_spec(m) is None)


def repo_venv_python(scripts_dir: Path) -> Path:
    return scripts_dir.parent / ".venv" / "bin" / "python"


def _is_running_venv(venv_python: Path) -> bool:
    # Compare prefixes, not executables: a venv's python is a symlink to the base one.
    try:
        return Path(sys.prefix).resolve() == venv_python.parent.parent.resolve()
    except OSError:
        return False


def how_to_fix(missing: Sequence[str], scripts_dir: Path) -> str:
    """The one line kiln prints when it cannot run here."""
    venv_python = repo_venv_python(scripts_dir)
    modules = ", ".join(missing)
    if _is_running_venv(venv_python) or os.environ.get(REEXEC_MARKER):
        problem = f"the repo venv ({venv_python}) lacks {modules}"
    elif venv_python.exists():
        problem = f"{sys.executable} lacks {modules}"
    else:
        problem = f"{sys.executable} lacks {modules} and there is no repo venv at {venv_python}"
    return (f"kiln: {problem}; run `make venv` and use .venv/bin/python scripts/kiln, "
            "or `python -m pip install -r requirements/kiln.txt`")


def _reexec_or_exit(missing: Sequence[str], script: Path, argv: Sequence[str]) -> None:
    scripts_dir = script.resolve().parent
    venv_python = repo_venv_python(scripts_dir)
    if venv_python.exists() and not _is_running_venv(venv_python) and not os.environ.get(REEXEC_MARKER):
        env = dict(os.environ, **{REEXEC_MARKER: "1"})
        try:
            os.execve(venv_python, [str(venv_python), str(script), *argv], env)  # noqa: S606 - the repo venv, by path
        except OSError as exc:
            print(f"kiln: cannot run {venv_python} ({exc.strerror}); {how_to_fix(missing, scripts_dir)}",
                  file=sys.stderr)
            raise SystemExit(EXIT_ENVIRONMENT) from None
    print(how_to_fix(missing, scripts_dir), file=sys.stderr)
    raise SystemExit(EXIT_ENVIRONMENT)


def run_kiln(script: Path, argv: Sequence[str]) -> int:
    """`kiln ARGV`, as scripts/kiln (at `script`) runs it."""
    scripts_dir = script.resolve().parent
    if sys.version_info < MIN_PYTHON:
        import platform

        wanted = ".".join(map(str, MIN_PYTHON))
        _reexec_or_exit([f"Python >= {wanted} (it is {platform.python_version()})"], script, argv)
    if missing_modules(KNOWN_THIRD_PARTY):
        missing = missing_modules(sorted(third_party_imports(scripts_dir.parent / "src", command_modules(argv))))
        if missing:
            _reexec_or_exit(missing, script, argv)
    os.environ.pop(REEXEC_MARKER, None)  # kiln's own subprocesses start afresh
    from kiln_tool.cli import main

    try:
        return main(list(argv))
    except ModuleNotFoundError as exc:
        # An import the source scan could not see (a computed name): still one line.
        top = (exc.name or "").partition(".")[0]
        if not top or top == PACKAGE:
            raise
        print(how_to_fix([top], scripts_dir), file=sys.stderr)
        return EXIT_ENVIRONMENT
