#!/usr/bin/env python3
"""Mutation testing of the security gates (issue 26): mutmut 3 on safezip, index identity/manifest/publish
and the audit checks, with the tests that cover them; a report per module, less the listed equivalent mutants.

    tools/mutation.py run [MODULE ...] [--max-children N] [--keep]   # mutmut, then the report
    tools/mutation.py report [MODULE ...]                            # the report of the last run
    tools/mutation.py changed [BASE]                                 # the modules a change touches

Each module runs in its own copy of the project (build/mutation/<module>/: src, tests, data, scripts and
pyproject.toml with a [tool.mutmut] section for that module), so mutmut's mutants/ never lands in the work
tree and modules can be run apart. mutmut sets sys.path to mutants/src itself (src layout) and pytest's
``pythonpath = ["src", "tests"]`` resolves inside the copy; data/ is copied (safezip and the audit policy read
it through ``Path(__file__).parents[...]``).

A mutant's id (in the report and in data/mutation/equivalent.toml) is ``module:function: -old => +new``:
the function it is in and the source lines the mutation removes and adds, whitespace collapsed, not
mutmut's number (which shifts when a mutation is added or removed earlier in the same function) nor a
line number (which shifts with any edit above). A listed equivalent mutant that no longer exists, or that
the tests now kill, fails the report: the list cannot rot.

Statuses: killed (a test failed, or mutmut's type check caught it), survived, timeout (counted as killed
in the score, as mutmut does: a mutant that loops forever is detected), no tests (no selected test
reaches the function: counted as surviving). Score = (killed + timeout) / (all - equivalent).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the mutation venv is Python 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "build" / "mutation"
EQUIVALENT_FILE = REPO / "data" / "mutation" / "equivalent.toml"
VENV = Path(os.environ.get("MUTATION_VENV", REPO / ".venv-mutation"))
TARGET = 0.95
SEPARATOR = "ǁ"  # mutmut's separator of class and method in a mangled name

# The tests that cover each module: in-process tests that need no built extension, browser or torch. Left
# out: tests of real built wheels, and the slow subprocess re-runs of cases the in-process tests already run
# (each surviving mutant runs every test that reaches its function).
_LEFT_OUT = ["--deselect", "tests/trust/test_kiln_wheel.py::test_real_kiln_wheels_fit_the_definition",
             "--deselect", "tests/trust/test_kiln_wheel.py::test_a_malformed_elf_is_a_clear_refusal",
             "--deselect", "tests/trust/test_properties.py::test_real_subprocess_runs_keep_the_promises"]
_TRUST = ["tests/trust", *_LEFT_OUT]
# The in-process index tests; the others start from the real CPU wheel (a build) or real servers.
_INDEX = ["tests/index/test_bad_input.py", "tests/index/test_merge_commit.py", "tests/index/test_manifest_reading.py",
          "tests/index/test_audit_gate.py", "tests/index/test_storage_publish.py", "tests/index/test_site_writes.py",
          "tests/index/test_identity_fields.py", "tests/index/test_manifest_entries.py"]
_AUDIT = ["tests/audit/test_checks.py", "tests/audit/test_rules.py", "tests/audit/test_report.py",
          "tests/audit/test_inputs.py", "tests/audit/test_cuda.py", "tests/audit/test_archs.py",
          "tests/audit/test_policy_target.py", "tests/audit/test_resolution.py",
          "tests/audit/test_loading.py", "tests/audit/test_dwarf_paths.py", "tests/audit/test_output.py",
          "tests/audit/test_target_choice.py", "tests/audit/test_exports_rules.py",
          "tests/audit/test_hardening_rules.py", "tests/audit/test_cuda_rules.py", "tests/audit/test_abi_rules.py",
          "tests/audit/test_registration_rules.py", "tests/audit/test_build_paths_rules.py",
          "tests/audit/test_wheel_rules.py", "tests/audit/test_symbols_rules.py",
          # Round 3's classes: foreign wheels (torch pin), other architectures, API evidence, programs, damaged
          # ELFs, dependency trees. Without them its new code ran under none of its own tests (audit-wheel: 88.3%).
          "tests/audit/test_foreign_wheels.py", "tests/audit/test_foreign_arch.py",
          "tests/audit/test_api_evidence.py", "tests/audit/test_programs.py", "tests/audit/test_damaged_elf.py",
          "tests/audit/test_build_path_trees.py"]


@dataclass(frozen=True)
class Module:
    name: str
    paths: tuple[str, ...]  # globs of source files, relative to the repo
    tests: tuple[str, ...]


MODULES = {
    m.name: m for m in (
        Module("safezip", ("src/kiln_tool/safezip.py",),
               ("tests/trust/test_safezip.py", "tests/trust/test_safezip_limits.py", "tests/trust/test_hostile_zips.py",
                "tests/trust/test_kiln_wheel.py", "tests/trust/test_properties.py::test_zip_structures", *_LEFT_OUT)),
        Module("identity", ("src/kiln_tool/index/identity.py",), (*_TRUST, "tests/index/test_identity_fields.py")),
        Module("manifest", ("src/kiln_tool/index/manifest.py",), (*_TRUST, *_INDEX)),
        Module("publish", ("src/kiln_tool/index/publish.py",), (*_TRUST, *_INDEX)),
        # One module per audit check (a run of all of them takes hours here); "audit-checks" names them all.
        *(Module(f"audit-{check.replace('_', '-')}", (f"src/kiln_tool/audit/checks/{check}.py",), tuple(_AUDIT))
          for check in ("abi", "build_paths", "cuda", "exports", "hardening", "registration", "symbols", "wheel")),
    )
}
GROUPS = {"audit-checks": [name for name in MODULES if name.startswith("audit-")]}


@dataclass
class Mutant:
    key: str  # mutmut's name: kiln_tool.safezip.x_member_problem__mutmut_3
    module: str  # kiln_tool.safezip
    function: str  # member_problem, SafeZip.stream
    change: str  # -old => +new
    status: str

    @property
    def id(self) -> str:
        return f"{self.module}:{self.function}: {self.change}"


@dataclass
class ModuleReport:
    name: str
    mutants: list[Mutant] = field(default_factory=list)
    equivalent: list[Mutant] = field(default_factory=list)
    wall_s: float | None = None

    def count(self, status: str) -> int:
        return sum(1 for m in self.mutants if m.status == status)

    @property
    def score(self) -> float:
        considered = len(self.mutants)
        return 1.0 if considered == 0 else (self.count("killed") + self.count("timeout")) / considered


_STATUS = {1: "killed", 3: "killed", 37: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
           36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}


def status_of(exit_code: int | None) -> str:
    if exit_code is None:
        return "not checked"
    return _STATUS.get(exit_code, "suspicious")


def _collapse(lines: list[str]) -> str:
    return " / ".join(" ".join(line.split()) for line in lines if line.strip())


def describe(orig: str, mutant: str) -> str:
    """``-old => +new``: the lines a mutant changes (mutmut's names in the def lines left out: a default
    argument's mutant changes the def line alone)."""
    a, b = (re.sub(r"__mutmut_\w+\(", "(", text, count=1).splitlines() for text in (orig, mutant))
    removed: list[str] = []
    added: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += a[i1:i2]
            added += b[j1:j2]
    return f"-{_collapse(removed)} => +{_collapse(added)}"


def _strip_marker(source: str) -> str:
    return "\n".join(line.replace("# type: ignore # mutmut generated", "").rstrip() for line in source.splitlines())


def mutated_functions(path: Path) -> dict[str, str]:
    """Every generated function of a mutated file by mangled name (x_f__mutmut_3, xǁCǁm__mutmut_orig)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    found: dict[str, str] = {}
    nodes: list[ast.stmt] = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            nodes += node.body
    lines = text.splitlines()
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "__mutmut_" in node.name \
                and node.end_lineno is not None:
            found[node.name] = _strip_marker("\n".join(lines[node.lineno - 1:node.end_lineno]))
    return found


def function_name(mangled: str) -> str:
    if mangled.startswith(f"x{SEPARATOR}"):
        _x, cls, method = mangled.split(SEPARATOR, 2)
        return f"{cls}.{method}"
    return mangled[2:]


def collect(work: Path) -> list[Mutant]:
    """The mutants of a finished run in ``work`` (mutants/**/*.py.meta and the mutated files beside them)."""
    mutants: list[Mutant] = []
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        source = meta.with_suffix("")
        rel = source.relative_to(work / "mutants" / "src").with_suffix("")
        module = ".".join(rel.parts)
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        functions = mutated_functions(source)
        seen: dict[str, int] = {}
        for key in sorted(codes, key=_natural):
            mangled = key.rpartition(".")[2]
            base = mangled.partition("__mutmut_")[0]
            orig = functions.get(f"{base}__mutmut_orig")
            body = functions.get(mangled)
            change = describe(orig, body) if orig is not None and body is not None else f"(no source: {mangled})"
            func = function_name(base)
            # Two mutants of one function with the same text (rare): numbered in order of appearance.
            ident = f"{func}: {change}"
            seen[ident] = seen.get(ident, 0) + 1
            if seen[ident] > 1:
                change = f"{change} #{seen[ident]}"
            mutants.append(Mutant(key, module, func, change, status_of(codes[key])))
    return mutants


def _natural(key: str) -> tuple[str, int]:
    base, _, number = key.rpartition("__mutmut_")
    return base, int(number) if number.isdigit() else -1


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    """id -> reason, from data/mutation/equivalent.toml ([[mutant]] id = ..., reason = ...)."""
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    listed: dict[str, str] = {}
    for item in data.get("mutant", []):
        ident, reason = item.get("id"), item.get("reason")
        if not isinstance(ident, str) or not isinstance(reason, str) or not reason.strip():
            raise SystemExit(f"{path}: every [[mutant]] needs an id and a one-line reason: {item!r}")
        if ident in listed:
            raise SystemExit(f"{path}: {ident!r} listed twice")
        listed[ident] = reason
    return listed


def module_of_id(ident: str) -> str:
    return ident.partition(":")[0]


def build_reports(results: dict[str, list[Mutant]], equivalent: dict[str, str]) -> tuple[list[ModuleReport], list[str]]:
    """Per-module reports, equivalent mutants subtracted; and the problems of the list (stale or killed ids)."""
    problems: list[str] = []
    reports: list[ModuleReport] = []
    ran_modules = {m.module for mutants in results.values() for m in mutants}
    by_id = {m.id: m for mutants in results.values() for m in mutants}
    for ident in equivalent:
        if module_of_id(ident) not in ran_modules:
            continue  # a module not run this time
        found = by_id.get(ident)
        if found is None:
            problems.append(f"listed as equivalent but no such mutant exists (the code changed?): {ident}")
        elif found.status in ("killed", "timeout"):
            problems.append(f"listed as equivalent but the tests kill it (remove it from the list): {ident}")
    for name, mutants in results.items():
        per_file: dict[str, ModuleReport] = {}
        for mutant in mutants:
            report = per_file.setdefault(mutant.module, ModuleReport(mutant.module))
            if mutant.id in equivalent and mutant.status not in ("killed", "timeout"):
                report.equivalent.append(mutant)
            else:
                report.mutants.append(mutant)
        if not per_file:
            problems.append(f"{name}: the run produced no mutants")
        reports += per_file.values()
    return reports, problems


def render_markdown(reports: list[ModuleReport], equivalent: dict[str, str], problems: list[str],
                    walls: dict[str, float]) -> str:
    lines = ["# Mutation report", "",
             "| module | mutants | killed | survived | timeout | no tests | equivalent | score |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(reports, key=lambda r: r.name):
        total = len(r.mutants) + len(r.equivalent)
        lines.append(f"| {r.name} | {total} | {r.count('killed')} | {r.count('survived')} | {r.count('timeout')} | "
                     f"{r.count('no tests')} | {len(r.equivalent)} | {100 * r.score:.1f}% |")
    if walls:
        lines += ["", "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(walls.items()))]
    lines += ["", f"Target: {100 * TARGET:.0f}% of non-equivalent mutants killed in each module.", ""]
    for r in sorted(reports, key=lambda r: r.name):
        alive = [m for m in r.mutants if m.status not in ("killed", "timeout")]
        if alive:
            lines += [f"## {r.name}: not killed", ""]
            lines += [f"- {m.status}: `{m.id}` ({m.key})" for m in alive]
            lines.append("")
    if problems:
        lines += ["## Problems", ""] + [f"- {p}" for p in problems] + [""]
    return "\n".join(lines)


def _mutmut_section(module: Module, max_children: int) -> str:
    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return "\n".join([
        "", "[tool.mutmut]",
        'source_paths = ["src"]',
        f"only_mutate = {toml_list(list(module.paths))}",
        'also_copy = ["data", "scripts", "conftest.py", "VERSION"]',
        f"pytest_add_cli_args_test_selection = {toml_list(list(module.tests))}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-m", "not slow and not gpu"]',
        # Each mutant forks from a server that only collected the tests: no function cache (functools.cache)
        # holds results computed by the unmutated code in an earlier test.
        'process_isolation = "forkserver"',
        # A raise statement's arguments are its message: the verdict is the raise itself (decided by the
        # condition before it, which is mutated). Message wording is pinned by the tests' match= where it matters.
        "do_not_mutate_patterns = ['^\\s*raise [\\w.]+\\(']",  # raise X(...) and raise module.X(...)
        "use_git_change_detection = false",
        "",
    ])


# The copy's own root conftest: mutmut hands pytest a mutant's tests as an unordered set and stops at the first
# failure (-x), so a killed mutant costs every test run before the one that kills it. Running the tests mutmut
# measured fastest first (its mutmut-stats.json, written before the mutants run) ends a killed mutant early; a
# survivor still runs every test that reaches its function.
FASTEST_FIRST = '''"""Written by tools/mutation.py into a mutation run's copy only: the fastest tests first."""

import json
from pathlib import Path


def pytest_collection_modifyitems(session, config, items):  # type: ignore[no-untyped-def]
    stats = Path(__file__).with_name("mutmut-stats.json")
    if not stats.is_file():
        return  # the stats run itself
    durations = json.loads(stats.read_text(encoding="utf-8")).get("duration_by_test", {})
    place = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (durations.get(item.nodeid, float("inf")), place[id(item)]))
'''


def prepare(module: Module, max_children: int, without: tuple[str, ...] = (), root: Path = WORK) -> Path:
    missing = [t for t in module.tests if t.startswith("tests/") and not (REPO / t.split("::")[0]).exists()]
    if missing:  # a selection that names a test file no longer there has rotted: say so, do not shrink it
        raise SystemExit(f"mutation: {module.name}: no such test file: {', '.join(missing)} (see MODULES)")
    work = root / module.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_artifacts", ".pytest_cache")
    for folder in ("src", "tests", "data", "scripts"):
        shutil.copytree(REPO / folder, work / folder, ignore=ignore, symlinks=True)
    shutil.copy2(REPO / "VERSION", work / "VERSION")  # [tool.kiln] version-file: the copy is the configured project
    for test in without:  # a "before" measurement: the tests as they were, without these new files
        (work / test).unlink(missing_ok=True)
    module = Module(module.name, module.paths, tuple(t for t in module.tests if t not in without))
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    if "tool" in tomllib.loads(pyproject) and "mutmut" in tomllib.loads(pyproject)["tool"]:
        raise SystemExit("pyproject.toml has a [tool.mutmut] section: tools/mutation.py writes its own per module")
    (work / "pyproject.toml").write_text(pyproject + _mutmut_section(module, max_children), encoding="utf-8")
    if (REPO / "conftest.py").exists():
        raise SystemExit("conftest.py at the repository root: tools/mutation.py writes its own into each copy")
    (work / "conftest.py").write_text(FASTEST_FIRST, encoding="utf-8")
    return work


def run_module(module: Module, max_children: int, without: tuple[str, ...] = (), root: Path = WORK,
               only: list[str] | None = None, earlier: Path | None = None) -> float:
    mutmut = VENV / "bin" / "mutmut"
    if not mutmut.exists():
        raise SystemExit(f"{mutmut} is missing: make mutation-venv (requirements/mutation.txt)")
    work = prepare(module, max_children, without, root)
    if only is not None and earlier is not None:
        (work / "survivors_of").write_text(f"{earlier.resolve()}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUTANT_UNDER_TEST")}
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # The audit tests' corpus (tests/audit/audit_corpus.py) is built once, not once per mutant.
    env["KILN_AUDIT_CORPUS_CACHE"] = str((root / "audit-corpus").resolve())
    log = work / "mutmut.log"
    start = time.monotonic()
    with log.open("w") as fh:
        command = [str(mutmut), "run", "--max-children", str(max_children), *(only or [])]
        code = subprocess.run(command, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - start
    (work / "wall_s").write_text(f"{wall:.1f}\n")
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"mutation: mutmut failed for {module.name} (exit {code}); {log}:\n{tail}")
    return wall


def collect_carried(work: Path) -> list[Mutant]:
    """:func:`collect`, and for a run of only an earlier run's survivors (``work/survivors_of`` names that
    run's folder), the mutants it did not run as the earlier run (itself perhaps such a run) found them.
    What the earlier tests killed, the same tests (still there, unchanged: tests were only added) kill again;
    only a mutant of the same id is carried over."""
    mutants = collect(work)
    marker = work / "survivors_of"
    if marker.exists():
        earlier = {m.id: m.status for m in collect_carried(Path(marker.read_text().strip()))}
        for mutant in mutants:
            if mutant.status == "not checked" and earlier.get(mutant.id) in ("killed", "timeout"):
                mutant.status = earlier[mutant.id]
    return mutants


def function_texts(source: str) -> dict[str, str]:
    """Each function and method of a module by mutmut's mangled name (``x_f``, ``xǁCǁm``), as its AST without
    positions: an edit elsewhere in the file leaves it equal, any edit of its own code does not."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[f"x_{node.name}"] = ast.dump(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"x{SEPARATOR}{node.name}{SEPARATOR}{item.name}"] = ast.dump(item)
    return found


def _sources(module: Module) -> list[tuple[Path, str]]:
    """Each source file of ``module`` (relative to the repo) and its dotted module name."""
    rels = [path.relative_to(REPO) for pattern in module.paths for path in sorted(REPO.glob(pattern))]
    return [(rel, ".".join(rel.relative_to("src").with_suffix("").parts)) for rel in rels]


def changed_functions(earlier: Path, module: Module) -> list[str]:
    """mutmut's names (``kiln_tool.index.publish.x_f``) of the functions of ``module`` whose code differs
    between the copy an earlier run (its folder) mutated and the work tree now."""
    changed: list[str] = []
    for rel, dotted in _sources(module):
        before = earlier / rel
        old = function_texts(before.read_text(encoding="utf-8")) if before.exists() else {}
        new = function_texts((REPO / rel).read_text(encoding="utf-8"))
        changed += [f"{dotted}.{name}" for name, text in new.items() if old.get(name) != text]
    return changed


def _what_is_mutated(work: Path) -> object:
    """The mutmut settings of a run in ``work`` that decide which mutants a source yields."""
    section = tomllib.loads((work / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    return section.get("do_not_mutate_patterns")


def _what_is_mutated_now() -> object:
    section = tomllib.loads(_mutmut_section(next(iter(MODULES.values())), 1))["tool"]["mutmut"]
    return section.get("do_not_mutate_patterns")


def survivors(work: Path, module: Module | None = None) -> list[str]:
    """What a run of only an earlier run's (``work``) survivors must run: mutmut's names of the mutants that
    run did not kill in functions unchanged since, and every mutant (a pattern) of each function changed since
    (its mutants are numbered anew, so an earlier name may now be another mutant)."""
    if module is not None and _what_is_mutated(work) != _what_is_mutated_now():
        # Other settings number every function's mutants anew: run them all.
        return [f"{dotted}.*" for _rel, dotted in _sources(module)]
    changed = changed_functions(work, module) if module is not None else []
    kept = [m.key for m in collect_carried(work) if m.status not in ("killed", "timeout")
            and m.key.partition("__mutmut_")[0] not in changed]
    return kept + [f"{name}__mutmut_*" for name in changed]


def report(names: list[str], out: Path, root: Path = WORK) -> int:
    results: dict[str, list[Mutant]] = {}
    walls: dict[str, float] = {}
    for name in names:
        work = root / name
        if not (work / "mutants").is_dir():
            raise SystemExit(f"mutation: no run of {name} in {work} (tools/mutation.py run {name})")
        results[name] = collect_carried(work)
        if (work / "wall_s").exists():
            walls[name] = float((work / "wall_s").read_text())
    equivalent = load_equivalent()
    reports, problems = build_reports(results, equivalent)
    for r in reports:
        unchecked = [m for m in r.mutants if m.status in ("not checked", "suspicious", "skipped")]
        if unchecked:
            problems.append(f"{r.name}: {len(unchecked)} mutant(s) not checked, skipped or suspicious "
                            f"(e.g. {unchecked[0].key}): the run did not finish cleanly")
        if r.score < TARGET:
            problems.append(f"{r.name}: {100 * r.score:.1f}% of non-equivalent mutants killed, under "
                            f"{100 * TARGET:.0f}%")
    out.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(reports, equivalent, problems, walls)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    doc = {
        "target": TARGET,
        "modules": {r.name: {"killed": r.count("killed"), "survived": r.count("survived"),
                             "timeout": r.count("timeout"), "no_tests": r.count("no tests"),
                             "equivalent": len(r.equivalent), "score": round(r.score, 4),
                             "not_killed": [{"id": m.id, "key": m.key, "status": m.status}
                                            for m in r.mutants if m.status not in ("killed", "timeout")]}
                    for r in reports},
        "wall_s": walls,
        "problems": problems,
    }
    (out / "report.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(markdown)
    return 1 if problems else 0


def changed_modules(base: str) -> list[str]:
    """The modules whose source or tests a change touches (git diff against ``base``)."""
    found = subprocess.run(["git", "diff", "--name-only", base, "--"], cwd=REPO, capture_output=True, text=True,
                           check=False)
    if found.returncode != 0:
        raise SystemExit(f"mutation: git diff against {base!r} failed: {found.stderr.strip()}")
    diff = found.stdout.split()
    touched = []
    for module in MODULES.values():
        sources = [p for p in diff if any(Path(p).match(g) for g in module.paths)]
        tests = [p for p in diff if any(p == t or p.startswith(t.rstrip("/") + "/") for t in module.tests)]
        if sources or tests or any(p.startswith(("data/mutation/", "tools/mutation.py")) for p in diff):
            touched.append(module.name)
    return touched


def _names(given: list[str]) -> list[str]:
    names: list[str] = []
    for name in given:
        if name not in MODULES and name not in GROUPS:
            raise SystemExit(f"unknown module {name!r}: one of {', '.join([*MODULES, *GROUPS])}")
        names += [n for n in GROUPS.get(name, [name]) if n not in names]
    return names or list(MODULES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=WORK, help="where each module's copy is made")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="mutmut on each module, then the report")
    run.add_argument("modules", nargs="*")
    run.add_argument("--max-children", type=int, default=2)
    run.add_argument("--without", action="append", default=[], metavar="TEST_FILE",
                     help="leave this test file out of the copy (to measure the tests as they were before it)")
    run.add_argument("--out", type=Path, default=WORK, help="where report.md and report.json go")
    run.add_argument("--survivors-of", type=Path, metavar="WORK",
                     help="run only the mutants an earlier run (its --work folder) did not kill; the report "
                          "counts the others as that run found them (tests were only added since)")
    rep = sub.add_parser("report", help="the report of the last run")
    rep.add_argument("modules", nargs="*")
    rep.add_argument("--out", type=Path, default=WORK)
    chg = sub.add_parser("changed", help="the modules a change touches, one a line")
    chg.add_argument("base", nargs="?", default="origin/main")
    args = parser.parse_args(argv)
    if args.command == "changed":
        print("\n".join(changed_modules(args.base)))
        return 0
    names = _names(args.modules)
    if args.command == "run":
        for name in names:
            only = survivors(args.survivors_of / name, MODULES[name]) if args.survivors_of else None
            if only == []:
                raise SystemExit(f"mutation: {name}: the earlier run left no survivors to run again")
            earlier = args.survivors_of / name if args.survivors_of else None
            wall = run_module(MODULES[name], args.max_children, tuple(args.without), args.work, only, earlier)
            print(f"mutation: {name}: {wall:.0f} s", file=sys.stderr)
    return report(names, args.out, args.work)


if __name__ == "__main__":
    raise SystemExit(main())
