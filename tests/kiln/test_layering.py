"""kiln_tool's layers: commands are the top (parse, call, print, exit code); nothing below reaches up into them,
and no module borrows another module's private helpers."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "kiln_tool"
TOP = {"kiln_tool.cli", "kiln_tool.__main__", "kiln_tool.bootstrap"}  # what runs the commands


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, str, int]]:
    """(module imported from, name, line) for each `from X import name` and `import X` in `path`."""
    package = _module(path).split(".") if path.name == "__init__.py" else _module(path).split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
    return found


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_probe_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    seen = {(m, n) for m, n, _ in _imports(PACKAGE / "release.py")}
    assert ("kiln_tool.audit.release_rule", "release_rule") in seen
    assert ("kiln_tool.torch_abi_records", "record_needed_torches") in seen
    assert ("kiln_tool.audit", "AuditOptions") in seen
    seen = {(m, n) for m, n, _ in _imports(PACKAGE / "commands" / "audit.py")}
    assert ("kiln_tool.audit.release_rule", "release_rule") in seen


def test_nothing_below_the_commands_imports_them() -> None:
    reaching_up = []
    for path in _sources():
        module = _module(path)
        if module.startswith("kiln_tool.commands") or module in TOP:
            continue
        for imported, name, line in _imports(path):
            target = f"{imported}.{name}" if name else imported
            if target == "kiln_tool.commands" or target.startswith("kiln_tool.commands."):
                reaching_up.append(f"{path.relative_to(SRC)}:{line} imports {target}")
    assert reaching_up == []


def test_no_module_imports_another_modules_private_names() -> None:
    """The entry modules (TOP: the launcher's bootstrap and the CLI) are one layer and may share helpers."""
    borrowed = []
    for path in _sources():
        entry = _module(path) in TOP
        for imported, name, line in _imports(path):
            if entry and imported in TOP:
                continue
            if imported.startswith("kiln_tool") and name.startswith("_") and not name.startswith("__"):
                borrowed.append(f"{path.relative_to(SRC)}:{line} imports {name} from {imported}")
    assert borrowed == []
