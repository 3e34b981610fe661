"""docs/tool-kiln.md: every example table loads as the doc says, and the keys table lists exactly the schema's keys."""

from __future__ import annotations

import re
from pathlib import Path

from kiln_tool.project import load_project, schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "tool-kiln.md"


def _toml_blocks() -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)


def test_every_example_table_loads(tmp_path: Path) -> None:
    blocks = _toml_blocks()
    assert len(blocks) == 2
    loaded = []
    for number, text in enumerate(blocks):
        root = tmp_path / str(number)
        root.mkdir()
        (root / "pyproject.toml").write_text(text)
        loaded.append(load_project(root))
    kiln_build, backend_build = loaded
    assert (kiln_build.name, kiln_build.package, kiln_build.build, kiln_build.version) == (
        "ringops", "ringops", "kiln", "0.3.0")
    assert kiln_build.index_url == "https://example.org/ringops/wheels"
    assert (backend_build.name, backend_build.build, backend_build.libraries, backend_build.version) == (
        "twinlibs", "backend", "load-library", None)
    assert backend_build.schema_sources == ("csrc/*.cpp",)


def test_the_keys_table_is_the_schema() -> None:
    text = DOC.read_text()
    table = text.split("## Keys", 1)[1].split("##", 1)[0]
    documented = set()
    for row in re.findall(r"^\| `([^|]+?)` (?:/ `([^|]+?)` )?\|", table, flags=re.M):
        documented.update(k for k in row if k)
    assert documented == set(schema()["properties"])
