"""`kiln audit` imports what the audit of its input needs, nothing more (issue 44: no slower than auditwheel show).

A small wheel's audit is mostly Python's start-up and imports, so what the command's path imports is behaviour:
the audit of an ordinary CPU wheel and of a loose library must not load what only other inputs need (a kiln
wheel's own metadata rules, a CUDA library's device code, a missing library's declared dependencies, --release),
nor what no audit needs (the project's TOML reader, torch, rich). Checked in a fresh process, by the modules it
ends with, never by time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from audit_corpus import HARDENED, KILN, PY_SUFFIX, REPO, SOURCES, make_wheel
from hypothesis import given, settings
from hypothesis import strategies as st

# module -> why the audit of a CPU wheel (or loose library) whose libraries all resolve must not import it
NOT_IMPORTED = {
    "packaging.requirements": "a kiln wheel's own METADATA check, or a missing library's declared dependencies",
    "packaging.specifiers": "a kiln wheel's own METADATA check, or a torch requirement to match",
    "packaging.markers": "a missing library's declared dependencies",
    "packaging.version": "a wheel version that is not a plain release, or a torch pin to compare",
    "importlib.metadata": "the installed distributions, read only for a missing library",
    "tomllib": "a pyproject.toml (there is none where this audit runs)",
    "tomli": "a pyproject.toml (there is none where this audit runs)",
    "ctypes": "the demangler, for a symbol that may name std::string or std::list",
    "queue": "the unpacking thread, for members of 16 MiB and more",
    "torch": "nothing: the audit never imports torch",
    "rich": "nothing: kiln audit prints plain text",
    "kiln_tool.variant": "a kiln wheel's build info check",
    "kiln_tool.kiln_wheel": "the wheels of the project served here (the kiln-wheel definition)",
    "kiln_tool.audit.archs": "CUDA archs (--cuda-archs, --gpu, a build info's cuda_archs, device code)",
    "kiln_tool.audit.fatbin": "a library with device code (.nv_fatbin)",
    "kiln_tool.audit.checks.cuda": "a library with device code (.nv_fatbin)",
    "kiln_tool.audit.dependencies": "a missing library, or --fetch-dependencies",
    "kiln_tool.audit.release_rule": "--release",
    "kiln_tool.audit.render": "the text report (this run asks for --json)",
}

# Runs the command as scripts/kiln does, then writes the modules the process ended with.
_RUN = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from kiln_tool.bootstrap import run_kiln
code = run_kiln(Path(sys.argv[2]), sys.argv[4:])
Path(sys.argv[3]).write_text(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def test_audit_imports_only_what_its_input_needs(tmp_path: Path) -> None:
    (tmp_path / "clean.c").write_text(SOURCES["clean.c"])
    library = tmp_path / f"clean{PY_SUFFIX}"
    subprocess.run(["gcc", "-shared", "-o", str(library), "clean.c", *HARDENED], cwd=tmp_path, check=True,
                   capture_output=True)
    # A declared dependency that is installed nowhere: read only if some library were missing.
    wheel = make_wheel(tmp_path, {f"kilntest/clean{PY_SUFFIX}": library.read_bytes()},
                       requires=("kiln-no-such-dependency>=1",))
    work = tmp_path / "elsewhere"  # no pyproject.toml: no project is served here
    work.mkdir()
    modules_file = tmp_path / "modules.json"
    result = subprocess.run([sys.executable, "-c", _RUN, str(REPO / "src"), str(KILN), str(modules_file),
                             "audit", "--json", str(wheel), str(library)],
                            cwd=work, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The audit ran to its end: both artifacts, each library judged by the symbol checks.
    assert [a["kind"] for a in report["artifacts"]] == ["wheel", "library"]
    for artifact in report["artifacts"]:
        assert any(c["id"] == "undefined-symbols" for lib in artifact["libraries"] for c in lib["checks"]), artifact
    ended = json.loads(modules_file.read_text())
    assert ended["code"] == 0 and report["ok"] is True
    loaded = set(ended["modules"])
    assert "kiln_tool.audit.engine" in loaded and "elftools.elf.elffile" in loaded  # the path itself was taken
    wrong = {m: why for m, why in NOT_IMPORTED.items() if m in loaded}
    assert not wrong, "kiln audit imported what this input does not need:\n" + "\n".join(
        f"  {m}: only for {why}" for m, why in sorted(wrong.items()))


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.lists(st.integers(0, 10**12), min_size=1, max_size=6).map(lambda p: ".".join(map(str, p))),
                 st.text(alphabet="0123456789.+-_abcdeloprstv!*\n ", max_size=24)))
def test_the_plain_release_shortcut_is_packagings_answer(version: str) -> None:
    """wheel-tag reads a plain release's local label (None) without importing packaging: only where packaging
    itself parses the version and finds no local label."""
    from packaging.version import Version

    from kiln_tool.audit.checks.wheel import _PLAIN_RELEASE

    if _PLAIN_RELEASE.fullmatch(version):
        assert Version(version).local is None
