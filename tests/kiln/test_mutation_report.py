"""tools/mutation.py's report: mutant ids that survive unrelated edits, statuses read from mutmut's files,
equivalent mutants subtracted exactly, and a list of equivalents that cannot rot (no mutmut run needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


mutation = load_script(REPO / "tools" / "mutation.py", "kiln_mutation_tool")

ORIG = '''def x_check__mutmut_orig(n):
    total = n + 1  # type: ignore # mutmut generated
    return total > 3  # type: ignore # mutmut generated
'''


def _fake_run(work: Path, mutants: dict[str, tuple[str, int | None]], extra_lines: int = 0) -> None:
    """A finished mutmut run of one module, kiln_tool.demo: its mutated file and meta file."""
    source = work / "mutants" / "src" / "kiln_tool" / "demo.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    body = "\n" * extra_lines + ORIG
    codes = {}
    for number, (line, code) in mutants.items():
        body += "\n\n" + ORIG.replace("__mutmut_orig", f"__mutmut_{number}").replace("return total > 3", line)
        codes[f"kiln_tool.demo.x_check__mutmut_{number}"] = code
    source.write_text(body)
    meta = {"exit_code_by_key": codes, "durations_by_key": {}, "estimated_durations_by_key": {}}
    (source.parent / "demo.py.meta").write_text(json.dumps(meta))


def test_a_mutant_id_is_its_function_and_changed_text(tmp_path: Path) -> None:
    _fake_run(tmp_path, {"1": ("return total >= 3", 1), "2": ("return total > 4", 0), "3": ("return total", None)})
    found = {m.key.rpartition("_")[2]: m for m in mutation.collect(tmp_path)}
    assert found["1"].id == "kiln_tool.demo:check: -return total > 3 => +return total >= 3"
    assert [found[k].status for k in "123"] == ["killed", "survived", "not checked"]


def test_an_id_survives_edits_above_and_a_renumbering(tmp_path: Path) -> None:
    _fake_run(tmp_path / "a", {"1": ("return total > 4", 0)})
    _fake_run(tmp_path / "b", {"7": ("return total > 4", 0)}, extra_lines=40)
    (first,), (second,) = mutation.collect(tmp_path / "a"), mutation.collect(tmp_path / "b")
    assert first.key != second.key and first.id == second.id


@pytest.mark.parametrize(("code", "status"), [(1, "killed"), (0, "survived"), (33, "no tests"), (36, "timeout"),
                                              (37, "killed"), (-11, "suspicious"), (None, "not checked")])
def test_statuses_are_mutmuts(code: int | None, status: str) -> None:
    assert mutation.status_of(code) == status


def _mutants(*statuses: str) -> list[object]:
    return [mutation.Mutant(f"kiln_tool.demo.x_f__mutmut_{i}", "kiln_tool.demo", "f", f"-a => +b{i}", s)
            for i, s in enumerate(statuses)]


def test_equivalent_mutants_are_subtracted_exactly() -> None:
    mutants = _mutants("killed", "killed", "killed", "survived", "survived")
    equivalent = {"kiln_tool.demo:f: -a => +b4": "does nothing"}
    (report,), problems = mutation.build_reports({"demo": mutants}, equivalent)
    assert problems == []
    assert [m.id for m in report.equivalent] == ["kiln_tool.demo:f: -a => +b4"]
    assert report.score == pytest.approx(3 / 4)


def test_a_listed_mutant_that_is_gone_or_killed_fails_the_report() -> None:
    mutants = _mutants("killed", "survived")
    equivalent = {"kiln_tool.demo:f: -a => +b0": "killed now", "kiln_tool.demo:f: -gone => +x": "gone",
                  "kiln_tool.other:g: -a => +b": "a module not run this time"}
    (report,), problems = mutation.build_reports({"demo": mutants}, equivalent)
    assert len(problems) == 2
    assert any("tests kill it" in p and "+b0" in p for p in problems)
    assert any("no such mutant" in p and "+x" in p for p in problems)
    assert report.equivalent == [] and report.score == pytest.approx(1 / 2)


def test_an_entry_without_a_reason_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "equivalent.toml"
    path.write_text('[[mutant]]\nid = "kiln_tool.demo:f: -a => +b"\nreason = " "\n')
    with pytest.raises(SystemExit, match="one-line reason"):
        mutation.load_equivalent(path)
    path.write_text('[[mutant]]\nid = "x"\nreason = "r"\n\n[[mutant]]\nid = "x"\nreason = "r"\n')
    with pytest.raises(SystemExit, match="listed twice"):
        mutation.load_equivalent(path)


def test_the_committed_list_is_well_formed() -> None:
    listed = mutation.load_equivalent()
    for ident, reason in listed.items():
        assert ident.partition(":")[0] in {"kiln_tool.safezip", "kiln_tool.index.identity", "kiln_tool.index.manifest",
                                          "kiln_tool.index.publish"} or ident.startswith("kiln_tool.audit.checks.")
        assert " => +" in ident and "\n" not in reason


def test_a_survivors_run_carries_over_what_the_earlier_run_killed(tmp_path: Path) -> None:
    _fake_run(tmp_path / "before", {"1": ("return total >= 3", 1), "2": ("return total > 4", 0)})
    _fake_run(tmp_path / "after", {"1": ("return total >= 3", None), "2": ("return total > 4", 1)})
    (tmp_path / "after" / "survivors_of").write_text(str(tmp_path / "before"))
    assert [m.status for m in mutation.collect_carried(tmp_path / "after")] == ["killed", "killed"]
    assert mutation.survivors(tmp_path / "before") == ["kiln_tool.demo.x_check__mutmut_2"]


@pytest.mark.parametrize("name", sorted(mutation.MODULES))
def test_each_module_names_sources_and_tests_that_exist(name: str) -> None:
    """A selection that names a moved or never-written test file would measure less than it says."""
    module = mutation.MODULES[name]
    assert all(list(REPO.glob(pattern)) for pattern in module.paths), module.paths
    files = [t.split("::")[0] for t in module.tests if t.startswith("tests/")]
    assert files and all((REPO / f).exists() for f in files), [f for f in files if not (REPO / f).exists()]


def test_a_selection_naming_a_missing_test_file_is_refused(tmp_path: Path) -> None:
    broken = mutation.Module("demo", ("src/kiln_tool/safezip.py",), ("tests/trust/no_such_test.py",))
    with pytest.raises(SystemExit, match=r"no such test file: tests/trust/no_such_test\.py"):
        mutation.prepare(broken, 1, root=tmp_path)
    assert not (tmp_path / "demo").exists()


def test_a_survivors_run_runs_every_mutant_of_a_function_changed_since(tmp_path: Path) -> None:
    """mutmut numbers a function's mutants anew when its code changes: an earlier name may be another mutant
    now, so a changed function is run whole; an unchanged one (edits above it, comments) only its survivors."""
    old = textwrap.dedent("""\
        import os

        def f(n):
            return n + 1

        class C:
            def m(self):
                return 2

        def g():
            return 3
        """)
    new = old.replace("import os\n", "import os\n# a comment\n\n\n").replace("n + 1", "n + 2") \
        .replace("return 3", "return 3  # same code")
    assert mutation.function_texts(old).keys() == {"x_f", "xǁCǁm", "x_g"}
    changed = {k for k, v in mutation.function_texts(new).items() if mutation.function_texts(old)[k] != v}
    assert changed == {"x_f"}


def test_a_copy_runs_the_fastest_tests_first(tmp_path: Path) -> None:
    # The conftest prepare() writes into a copy orders pytest's items by mutmut's measured durations, so -x ends
    # a killed mutant at the first fast test that kills it; before the stats exist it leaves the order alone.
    work = mutation.prepare(mutation.MODULES["identity"], 1, root=tmp_path)
    assert "mutmut-stats.json" in (work / "conftest.py").read_text()
    assert '"conftest.py"' in (work / "pyproject.toml").read_text()
    (tests := tmp_path / "suite" / "tests").mkdir(parents=True)
    (tmp_path / "suite" / "conftest.py").write_text((work / "conftest.py").read_text())
    (tests / "test_order.py").write_text(textwrap.dedent("""
        import os
        ORDER = os.environ["KILN_ORDER_FILE"]

        def _seen(name):
            with open(ORDER, "a") as fh:
                fh.write(name + "\\n")

        def test_slow(): _seen("slow")
        def test_fast(): _seen("fast")
        def test_unmeasured(): _seen("unmeasured")
        def test_middle(): _seen("middle")
        """))
    def order() -> list[str]:
        seen = tmp_path / "order.txt"
        seen.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], check=True,
                       capture_output=True, cwd=tmp_path / "suite", env={**os.environ, "KILN_ORDER_FILE": str(seen)})
        return seen.read_text().split()

    assert order() == ["slow", "fast", "unmeasured", "middle"]
    (tmp_path / "suite" / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": {
        "tests/test_order.py::test_slow": 3.0, "tests/test_order.py::test_fast": 0.1,
        "tests/test_order.py::test_middle": 1.0}}))
    assert order() == ["fast", "middle", "slow", "unmeasured"]
