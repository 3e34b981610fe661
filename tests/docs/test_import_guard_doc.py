"""docs/import-guard.md: its two-line example is what the fixture projects use, its error message is what the
guard prints for that build info and that torch (rendered by the guard itself, in a package made from the
template), and it names every module of the guard."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "import-guard.md"
GUARD = REPO / "src" / "kiln_tool" / "guard"
PROJECTS = REPO / "tests" / "adopters" / "projects"

# The build info of the ringops CPU wheel for torch 2.13 (the fields the message uses, as kiln writes them).
RINGOPS_INFO = {"schema": 1, "project": "ringops", "package": "ringops", "namespace": "ringops", "build": "kiln",
                "libraries": "python-module", "targets": ["ringops/_C=python-module"], "version": "0.3.0+pt213cpu",
                "abi_mode": "torch", "torch_version": "2.13.0+cpu", "torch_major_minor": "2.13", "cuda": None,
                "cuda_tag": "cpu", "cuda_archs": [], "cxx11_abi": True, "python_tag": "cp311",
                "extension_suffix": "cpython-311-x86_64-linux-gnu", "ops": ["ringops::ring_shift"],
                "index_url": "https://wheels.ringops.example"}
RENDER = """\
from ringops._kiln import preflight
from ringops._kiln.buildinfo import build_info
env = preflight.Environment("2.14.1+cu130", "13.0", True, (3, 11), "cp311",
                            (".cpython-311-x86_64-linux-gnu.so", ".abi3.so", ".so"))
try:
    preflight.check(build_info(), env)
except ImportError as exc:
    print(type(exc).__name__)
    print(exc)
"""


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)


def test_the_two_lines_are_what_the_fixture_projects_use() -> None:
    (example,) = _blocks("python")
    lines = [line for line in example.splitlines() if line.strip()]
    assert lines == ["from ._kiln import guard", "guard.load(__name__)"]
    for project in ("ringops", "twinlibs"):
        code = (PROJECTS / project / project / "__init__.py").read_text()
        assert all(re.search(rf"^{re.escape(line)}", code, flags=re.M) for line in lines), project


def test_the_message_is_what_the_guard_prints(tmp_path: Path) -> None:
    package = tmp_path / "ringops"
    shutil.copytree(GUARD, package / "_kiln", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "__init__.py").write_text("")
    (package / "_build_info.json").write_text(json.dumps(RINGOPS_INFO))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGOPS_")}
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", RENDER], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    name, _, message = proc.stdout.partition("\n")
    assert name == "RingopsEnvironmentError"
    (documented,) = _blocks("text")
    assert message == documented


def test_it_names_every_module_of_the_guard() -> None:
    listed = re.search(r"stdlib-only modules: (.*?)\)", DOC.read_text(), flags=re.S)
    assert listed is not None
    documented = set(re.findall(r"`(\w+)`", listed.group(1)))
    assert documented == {p.stem for p in GUARD.glob("*.py")} - {"__init__"}
