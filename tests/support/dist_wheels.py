"""The wheels `kiln wheels` left in dist/ (make test's wheels phase builds them before the suite), and whether they
are current: newer than every source they are built from."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("ops", "python", "src/kiln_tool", "cmake", "CMakeLists.txt", "pyproject.toml")


def find_dist(pattern: str, where: Path = REPO / "dist") -> Path | None:
    """The last (by name) file of `where` matching `pattern`, or None."""
    hits = sorted(where.glob(pattern))
    return hits[-1] if hits else None


def newest_source() -> float:
    """The newest mtime of the sources a wheel of this checkout is built from."""
    newest = 0.0
    for name in SOURCES:
        path = REPO / name
        paths = [path] if path.is_file() else (
            p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        newest = max([newest, *(p.stat().st_mtime for p in paths)])
    return newest


def current_dist_wheel(pattern: str) -> Path | None:
    """dist/'s wheel matching `pattern` when it was made from the sources as they are; None otherwise."""
    wheel = find_dist(pattern)
    return wheel if wheel is not None and wheel.stat().st_mtime > newest_source() else None
