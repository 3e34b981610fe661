"""The `[tool.cibuildwheel]` table of a kiln project: generated (`kiln cibuildwheel --print-config`) and checked
(`kiln cibuildwheel --check-config`).

What kiln needs of a cibuildwheel run, whichever way the project builds (tool.kiln.build):

- no build isolation: isolation installs the newest torch it may, not the one the job builds against;
- before-build installs exactly the job's torch (`torch==$KILN_TORCH_VERSION` from `$KILN_TORCH_INDEX`), kiln
  itself (torch-kiln at this kiln's version; or kiln run from the project's own tree, `{project}/scripts/kiln`,
  for a project that ships kiln itself) and, with `kiln torch-runtime --install`, the CUDA runtime wheels the
  extension links;
- the repair command is kiln's and stops at the first failing step: `kiln repair {wheel} -w {dest_dir} && kiln
  audit --release {dest_dir}/*.whl`; a backend build's wheel is first labelled (`kiln label {wheel} -w DIR`:
  version label, torch pin, build info) and DIR's wheel repaired;
- the KILN_* values a job sets (kiln matrix --github), and SOURCE_DATE_EPOCH, reach the container
  (environment-pass);
- no musllinux or free-threaded builds: torch publishes neither.

Standard library and `packaging` only.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import resources

if TYPE_CHECKING:
    from ..matrix_data import Matrix
    from ..project import KilnProject

DISTRIBUTION = resources.DISTRIBUTION
KILN_PASSED: dict[str, str] = {
    "KILN_TORCH_VERSION": "the torch the job builds against",
    "KILN_TORCH_INDEX": "where that torch comes from",
    "KILN_VARIANT": "cpu or cuda: the build variant",
    "KILN_ABI_MODE": "torch or stable: the ABI the wheel targets",
    "KILN_CUDA_ARCHS": "the matrix's CUDA arch list",
    "KILN_GIT_COMMIT": "the commit, where the project folder has no .git",
    "KILN_STANDIN_MANYLINUX": "the one tag a stand-in base gives, which kiln audit --release asserts",
    "SOURCE_DATE_EPOCH": "one timestamp for reproducible wheels",
}
"""The variables environment-pass must name, and why each."""
ALSO_PASSED = ("CCACHE_DIR", "CCACHE_DISABLE", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_COMPILE",
               "KILN_GIT_DIRTY")
"""Passed by the generated table, not required: the compiler cache, a stand-in run's package sources, and whether
the exported tree differed from KILN_GIT_COMMIT (the build info's git_dirty; unknown where not passed)."""
SKIPPED: dict[str, tuple[str, str]] = {
    "musllinux": ("*-musllinux_*", "cp311-musllinux_x86_64"),
    "free-threaded": ("cp3??t-*", "cp314t-manylinux_x86_64"),
}
"""What the table must not build (torch has no such wheels): the generated skip pattern, and an identifier
of that kind the check asks about."""
CCACHE_LAUNCHERS = {f"CMAKE_{lang}_COMPILER_LAUNCHER": "ccache" for lang in ("C", "CXX", "CUDA")}
_TORCH_VERSION = re.compile(r"^\$(\{KILN_TORCH_VERSION([:]?[-?=+][^}]*)?\}|KILN_TORCH_VERSION)$")
_TORCH_INDEX = re.compile(r"^\$(\{KILN_TORCH_INDEX([:]?[-?=+][^}]*)?\}|KILN_TORCH_INDEX)$")
_SEPARATORS = ("&&", "||", ";", "|", "\n")
_PIP_VALUE_OPTIONS = frozenset({"-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
                                "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--python",
                                "--platform", "--python-version", "--implementation", "--abi", "-e", "--editable",
                                "--config-settings", "-C", "--src", "--upgrade-strategy", "--progress-bar",
                                "--cache-dir", "--log", "--proxy", "--cert", "--client-cert", "--trusted-host",
                                "--retries", "--timeout", "--exists-action", "--no-binary", "--only-binary",
                                "--report", "--dry-run-report"})
_KILN_GLOBAL_VALUE_OPTIONS = frozenset({"-C"})


class ConfigError(ValueError):
    """The table cannot be read at all (one line; exit 2)."""


# -- reading shell commands -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One simple command of a shell command line: its words and the separator that joins it to the one before."""

    words: tuple[str, ...]
    joined_by: str  # "" for the first step, else one of _SEPARATORS


@dataclass(frozen=True)
class KilnRun:
    """A step that runs kiln: installed (`kiln`, `python -m kiln_tool`) or from the project's tree."""

    index: int
    source: str  # "installed" or "tree"
    command: str
    args: tuple[str, ...]


def split_steps(command: str) -> list[Step]:
    """The simple commands of `command` (a `sh -c` line), split at &&, ||, ;, | and newlines outside quotes.
    ConfigError for a line shlex cannot read (an unbalanced quote)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    steps: list[Step] = []
    words: list[str] = []
    joined_by = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise ConfigError(f"{command!r} is not a shell command kiln can read ({exc})") from None
    for token in tokens:
        parts = [token] if token not in ("\n",) and "\n" not in token else _split_newlines(token)
        for part in parts:
            if part in _SEPARATORS or part == "&":
                if words:
                    steps.append(Step(tuple(words), joined_by))
                    words = []
                    joined_by = part
                continue
            words.append(part)
    if words:
        steps.append(Step(tuple(words), joined_by))
    return steps


def _split_newlines(token: str) -> list[str]:
    pieces: list[str] = []
    for index, piece in enumerate(token.split("\n")):
        if index:
            pieces.append("\n")
        if piece:
            pieces.append(piece)
    return pieces


def kiln_run(step: Step, index: int) -> KilnRun | None:
    """The kiln subcommand `step` runs, or None when it runs no kiln."""
    words = list(step.words)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words.pop(0)  # VAR=value before the command
    source = None
    if words and words[0] == "kiln":
        source, rest = "installed", words[1:]
    elif words and _is_tree_kiln(words[0]):
        source, rest = "tree", words[1:]
    elif len(words) >= 2 and _is_python(words[0]) and _is_tree_kiln(words[1]):
        source, rest = "tree", words[2:]
    elif len(words) >= 3 and _is_python(words[0]) and words[1:3] == ["-m", "kiln_tool"]:
        source, rest = "installed", words[3:]
    if source is None:
        return None
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in _KILN_GLOBAL_VALUE_OPTIONS and rest:
            rest.pop(0)
    if not rest:
        return None
    return KilnRun(index=index, source=source, command=rest[0], args=tuple(rest[1:]))


def _is_python(word: str) -> bool:
    return re.fullmatch(r"(.*/)?python(3(\.\d+)?)?", word) is not None


def _is_tree_kiln(word: str) -> bool:
    return word.startswith("{project}/") and word.endswith("/scripts/kiln")


@dataclass(frozen=True)
class PipInstall:
    index: int
    requirements: tuple[str, ...]
    options: dict[str, str]


def pip_install(step: Step, index: int) -> PipInstall | None:
    """`pip install ...`, `python -m pip install ...` or `uv pip install ...`: its requirements and the values of
    its options (the last of each)."""
    words = list(step.words)
    for start in range(len(words)):
        head = words[start:]
        if head[:2] == ["pip", "install"] or (re.fullmatch(r"(.*/)?pip3?", head[0]) and head[1:2] == ["install"]):
            rest = head[2:]
            break
        if len(head) >= 4 and _is_python(head[0]) and head[1:4] == ["-m", "pip", "install"]:
            rest = head[4:]
            break
    else:
        return None
    requirements: list[str] = []
    options: dict[str, str] = {}
    iterator = iter(rest)
    for word in iterator:
        if word.startswith("--") and "=" in word:
            name, _, value = word.partition("=")
            options[name] = value
        elif word in _PIP_VALUE_OPTIONS:
            options[word] = next(iterator, "")
        elif word.startswith("-"):
            options[word] = ""
        else:
            requirements.append(word)
    return PipInstall(index=index, requirements=tuple(requirements), options=options)


def _requirement_spec(text: str) -> str:
    """What follows a requirement's name and extras, without spaces ("==0.1.0"; "" when unpinned)."""
    match = re.match(r"^\s*[A-Za-z0-9._-]+\s*(\[[^\]]*\])?(?P<spec>.*)$", text)
    return re.sub(r"\s+", "", match.group("spec")) if match else text


def _requirement_name(text: str) -> str | None:
    match = re.match(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)", text)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


# -- the table ----------------------------------------------------------------------------------------------------


def _as_list(value: Any, where: str) -> list[str]:
    """cibuildwheel's list options: a TOML list of strings, or one string (space-separated for selectors)."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"tool.cibuildwheel.{where} = {json.dumps(value, default=str)[:60]} is not a string or a list "
                      "of strings")


def _commands(value: Any, where: str) -> str:
    """A command option (before-build, repair-wheel-command): a string, or a list cibuildwheel joins with &&."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " && ".join(value)
    raise ConfigError(f"tool.cibuildwheel.{where} is not a command (a string or a list of strings)")


def effective(table: Any) -> dict[str, Any]:
    """The options a Linux build sees: the table, with its [tool.cibuildwheel.linux] table over it."""
    if not isinstance(table, dict):
        raise ConfigError("tool.cibuildwheel is not a table")
    linux = table.get("linux", {})
    if not isinstance(linux, dict):
        raise ConfigError("tool.cibuildwheel.linux is not a table")
    return {**{k: v for k, v in table.items() if k not in ("linux", "macos", "windows", "overrides")}, **linux}


def _frontend(value: Any) -> tuple[str, list[str]]:
    if value is None:
        return "build", []
    if isinstance(value, str):
        name, _, rest = value.partition(";")
        args = []
        for item in rest.split(";"):
            key, _, text = item.strip().partition(":")
            if key.strip() == "args":
                args += shlex.split(text)
        return name.strip(), args
    if isinstance(value, dict):
        args = value.get("args", [])
        if not isinstance(value.get("name", ""), str) or not isinstance(args, list):
            raise ConfigError("tool.cibuildwheel.build-frontend is not {name = ..., args = [...]}")
        return str(value.get("name", "build")), [str(a) for a in args]
    raise ConfigError("tool.cibuildwheel.build-frontend is not a string or a table")


_NO_ISOLATION = {"pip": {"--no-build-isolation"}, "uv": {"--no-build-isolation"},
                 "build": {"--no-isolation", "-n"}, "build[uv]": {"--no-isolation", "-n"}}


def _isolation_problems(options: dict[str, Any]) -> Iterator[str]:
    name, args = _frontend(options.get("build-frontend"))
    if not set(args) & _NO_ISOLATION.get(name, set()):
        yield (f"build isolation is on (build-frontend {name!r}): the build would get the newest torch the resolver "
               "picks, not the job's; set build-frontend = { name = \"pip\", args = [\"--no-build-isolation\"] }")


def _selection_problems(options: dict[str, Any]) -> Iterator[str]:
    build = _as_list(options.get("build", "*"), "build") or ["*"]
    skip = _as_list(options.get("skip", []), "skip")
    for kind, (pattern, identifier) in SKIPPED.items():
        chosen = any(fnmatch.fnmatchcase(identifier, p) for p in build)
        if chosen and not any(fnmatch.fnmatchcase(identifier, p) for p in skip):
            yield f"skip does not skip {kind} builds (e.g. {identifier}; add {pattern!r}): torch has no such wheels"


def _pass_problems(options: dict[str, Any]) -> Iterator[str]:
    passed = set(_as_list(options.get("environment-pass", []), "environment-pass"))
    for name, why in KILN_PASSED.items():
        if name not in passed:
            yield f"environment-pass lacks {name} ({why}): the container would not see the job's value"


def _kiln_runs(steps: list[Step]) -> list[KilnRun]:
    return [run for index, step in enumerate(steps) if (run := kiln_run(step, index)) is not None]


def _before_build_problems(steps: list[Step], repair_runs: list[KilnRun], version: str) -> Iterator[str]:
    installs = [p for index, step in enumerate(steps) if (p := pip_install(step, index)) is not None]
    runs = _kiln_runs(steps)
    torch = [(p, r) for p in installs for r in p.requirements
             if r.startswith("torch==") and _TORCH_VERSION.match(r[len("torch=="):])]
    if not torch:
        yield ("before-build does not install torch==${KILN_TORCH_VERSION}: the build would use whatever torch the "
               "image has, not the job's")
    else:
        install = torch[0][0]
        index = install.options.get("--index-url", install.options.get("-i", ""))
        if not _TORCH_INDEX.match(index):
            yield ("before-build installs torch==${KILN_TORCH_VERSION} from another index than "
                   "--index-url \"${KILN_TORCH_INDEX}\" (the job's variant: cpu, cu130...)")
    runtime = [r for r in runs if r.command == "torch-runtime" and "--install" in r.args]
    if not runtime:
        yield ("before-build does not run kiln torch-runtime --install: a CUDA wheel's repair and audit would miss "
               "the runtime libraries it links (libcudart)")
    elif torch and runtime[0].index < torch[0][0].index:
        yield "before-build runs kiln torch-runtime --install before it installs torch"
    installed_kiln = [r for r in [*runs, *repair_runs] if r.source == "installed"]
    kiln_installs = [(p, r) for p in installs for r in p.requirements if _requirement_name(r) == DISTRIBUTION]
    if installed_kiln and not kiln_installs:
        yield (f"before-build does not install {DISTRIBUTION}, but the table runs `kiln`: add "
               f"\"python -m pip install {DISTRIBUTION}=={version}\" first")
    for _install, requirement in kiln_installs:
        if _requirement_spec(requirement) != f"=={version}":
            yield (f"before-build installs {requirement!r}, not this kiln's version ({DISTRIBUTION}=={version}): "
                   "the container would repair and audit with another kiln")
    first_use = [r.index for r in runs if r.source == "installed"]
    if kiln_installs and first_use and first_use[0] < min(p.index for p, _ in kiln_installs):
        yield f"before-build runs kiln before it installs {DISTRIBUTION}"


def _repair_problems(command: str | None, project: KilnProject) -> Iterator[str]:
    example = repair_command(project)
    if command is None or not command.strip():
        yield f"no repair-wheel-command: the wheel would ship unrepaired and unaudited (use {example!r})"
        return
    steps = split_steps(command)
    runs = _kiln_runs(steps)
    by_name = {name: [r for r in runs if r.command == name] for name in ("label", "repair", "audit")}
    repair = by_name["repair"][0] if by_name["repair"] else None
    audit = by_name["audit"][0] if by_name["audit"] else None
    label = by_name["label"][0] if by_name["label"] else None
    if repair is None:
        yield f"repair-wheel-command does not run kiln repair (use {example!r})"
    else:
        if _option(repair.args, "-w", "--wheel-dir") != "{dest_dir}":
            yield "kiln repair in repair-wheel-command does not write into {dest_dir} (-w {dest_dir})"
        wheels = _positionals(repair.args, {"-w", "--wheel-dir"})
        if project.build == "backend":
            if label is None:
                yield ("repair-wheel-command does not run kiln label before kiln repair: a backend-built wheel has no "
                       f"version label, torch pin or build info (use {example!r})")
            elif label.index > repair.index:
                yield "repair-wheel-command runs kiln label after kiln repair"
            else:
                out = _option(label.args, "-w", "--wheel-dir")
                if "{wheel}" not in _positionals(label.args, {"-w", "--wheel-dir"}):
                    yield "kiln label in repair-wheel-command does not label {wheel}"
                if not out or not any(w.startswith(out.rstrip("/") + "/") for w in wheels):
                    yield "kiln repair in repair-wheel-command does not repair the wheel kiln label wrote"
        else:
            if label is not None:
                yield ('repair-wheel-command runs kiln label, which a kiln build refuses (tool.kiln.build = "kiln": '
                       "its metadata provider labels it)")
            if "{wheel}" not in wheels:
                yield "kiln repair in repair-wheel-command does not repair {wheel}"
    if audit is None:
        yield "repair-wheel-command does not run kiln audit --release on the repaired wheel"
    else:
        if "--release" not in audit.args:
            yield "kiln audit in repair-wheel-command lacks --release: the release floor would not be held"
        if not any(p.startswith("{dest_dir}") for p in _positionals(audit.args, set())):
            yield "kiln audit in repair-wheel-command does not audit the repaired wheel ({dest_dir}/*.whl)"
        if repair is not None and audit.index < repair.index:
            yield "repair-wheel-command runs kiln audit before kiln repair"
    loose = sorted({s.joined_by for s in steps[1:] if s.joined_by != "&&"})
    if loose:
        shown = ", ".join(repr("newline" if j == "\n" else j) for j in loose)
        yield (f"repair-wheel-command joins steps with {shown}, not only &&: a failing kiln repair or audit would not "
               "fail the build")


def _option(args: tuple[str, ...], *names: str) -> str | None:
    value = None
    for index, word in enumerate(args):
        for name in names:
            if word == name and index + 1 < len(args):
                value = args[index + 1]
            elif name.startswith("--") and word.startswith(name + "="):
                value = word[len(name) + 1:]
    return value


def _positionals(args: tuple[str, ...], value_options: set[str]) -> list[str]:
    found: list[str] = []
    skip = False
    for word in args:
        if skip:
            skip = False
        elif word in value_options:
            skip = True
        elif not word.startswith("-"):
            found.append(word)
    return found


def check(table: Any, project: KilnProject, version: str) -> list[str]:
    """One line per way `table` ([tool.cibuildwheel]) fails what kiln needs of a cibuildwheel run of `project`
    with kiln `version`; empty when it holds. ConfigError when the table cannot be read at all."""
    if table is None:
        return [f"{project.root / 'pyproject.toml'}: no [tool.cibuildwheel] table (kiln cibuildwheel --print-config "
                "writes one)"]
    options = effective(table)
    before = split_steps(_commands(options.get("before-build", ""), "before-build"))
    repair_text = options.get("repair-wheel-command")
    repair = None if repair_text is None else _commands(repair_text, "repair-wheel-command")
    repair_runs = _kiln_runs(split_steps(repair)) if repair else []
    return [*_isolation_problems(options), *_selection_problems(options), *_pass_problems(options),
            *_before_build_problems(before, repair_runs, version), *_repair_problems(repair, project)]


# -- generating ----------------------------------------------------------------------------------------------------


def repair_command(project: KilnProject) -> str:
    """kiln's repair step for `project`; a backend build's wheel is labelled first (into {dest_dir}/labelled,
    removed again: cibuildwheel wants exactly one wheel in {dest_dir}). Every kiln run names the project
    (-C {project}): its [tool.kiln] table decides the label, and which wheels the kiln-wheel definition holds,
    whatever folder cibuildwheel runs the command in."""
    kiln = "kiln -C {project}"
    audit = f"{kiln} audit --release {{dest_dir}}/*.whl"
    if project.build == "backend":
        return (f"{kiln} label {{wheel}} -w {{dest_dir}}/labelled && {kiln} repair {{dest_dir}}/labelled/*.whl "
                f"-w {{dest_dir}} && rm -r {{dest_dir}}/labelled && {audit}")
    return f"{kiln} repair {{wheel}} -w {{dest_dir}} && {audit}"


def build_selectors(project: KilnProject, matrix: Matrix) -> list[str]:
    """The CPythons the project's wheels are built for: the matrix's (one abi3 build when it is stable-ABI only)."""
    pythons = [matrix.stable_abi.python] if project.abi_modes == ("stable",) else list(matrix.python)
    return [f"cp{p.replace('.', '')}-*" for p in pythons]


def generate(project: KilnProject, matrix: Matrix, version: str) -> dict[str, Any]:
    """The [tool.cibuildwheel] table kiln `version` builds `project` with (check() finds nothing in it)."""
    unset = "set by the CI job (kiln matrix --github)"
    table: dict[str, Any] = {
        "build": build_selectors(project, matrix),
        "skip": [pattern for pattern, _ in SKIPPED.values()],
        "build-frontend": {"name": "pip", "args": ["--no-build-isolation"]},
        "build-verbosity": 1,
    }
    if project.build == "kiln":
        table["environment"] = dict(CCACHE_LAUNCHERS)
        if not project.ship_sources:  # as kiln wheels does: the project's own wheel.exclude and the sources
            from ..wheel_settings import SOURCE_PATTERNS

            table["environment"]["SKBUILD_WHEEL_EXCLUDE"] = ";".join([*project.wheel_exclude, *SOURCE_PATTERNS])
    table["environment-pass"] = [*KILN_PASSED, *ALSO_PASSED]
    table["before-build"] = [
        f'python -m pip install "{DISTRIBUTION}=={version}"',
        f'python -m pip install --no-deps "torch==${{KILN_TORCH_VERSION:?{unset}}}" '
        f'--index-url "${{KILN_TORCH_INDEX:?{unset}}}"',
        "kiln torch-runtime --install",
        "kiln cibuildwheel --install-build-requirements",
    ]
    table["repair-wheel-command"] = repair_command(project)
    table["before-test"] = ['python -m pip install "torch==${KILN_TORCH_VERSION}" --index-url "${KILN_TORCH_INDEX}"']
    return table


_COMMENTS = {
    "skip": "torch publishes no musllinux and no free-threaded wheels.",
    "build-frontend": "Against exactly the torch before-build installs, never a resolver's pick.",
    "environment": "ccache serves a second wheel's kernel objects from the first's.",
    "environment-pass": "What a CI job sets (kiln matrix --github), a stand-in run's package sources, and "
                        "PIP_NO_COMPILE (no bytecode for what the containers install).",
    "before-build": "kiln at this version; the job's torch without its runtime wheels (the build reads its files), "
                    "then the runtime wheels the extension links (kiln torch-runtime); then the build requirements "
                    "(kiln's hash-locked toolchain, or the backend's [build-system] requires).",
    "repair-wheel-command": "kiln repair (torch and CUDA excluded, the manylinux floor enforced), then the release "
                            "audit; a backend-built wheel is labelled first (version label, torch pin, build info).",
    "before-test": "The wheel's tests (add test-command) run against the same torch, with its runtime dependencies.",
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        inline = "[" + ", ".join(_toml_value(v) for v in value) + "]"
        if len(inline) <= 100:
            return inline
        return "[\n" + "".join(f"  {_toml_value(v)},\n" for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def render(table: dict[str, Any], project: KilnProject, version: str) -> str:
    """`table` as the [tool.cibuildwheel] section of a pyproject.toml, each setting with why it is there."""
    lines = [f"# Generated by `kiln cibuildwheel --print-config` (kiln {version}) for {project.name} "
             f"(tool.kiln.build = \"{project.build}\"); `kiln cibuildwheel --check-config` checks it.",
             "# A CI job sets only CIBW_BUILD, CIBW_ARCHS, the image and the KILN_* values (kiln matrix --github).",
             "[tool.cibuildwheel]"]
    for key, value in table.items():
        if key in _COMMENTS:
            lines += textwrap.wrap(_COMMENTS[key], width=100, initial_indent="# ", subsequent_indent="# ")
        lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    lines.append("# test-command: the project's own tests of the installed wheel, e.g. "
                 "\"python -m pytest {project}/tests -q\".")
    return "\n".join(lines) + "\n"


# -- reading and acting ------------------------------------------------------------------------------------------


def load_table(root: Path) -> Any:
    """The [tool.cibuildwheel] table of `root`'s pyproject.toml (None when it has none)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    path = root / "pyproject.toml"
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None
    tool = document.get("tool")
    return tool.get("cibuildwheel") if isinstance(tool, dict) else None


def build_requirements(project: KilnProject) -> list[str]:
    """pip's arguments for what a build without isolation needs beside torch and kiln: kiln's hash-locked toolchain
    (a kiln build: scikit-build-core, cmake, ninja...), or the backend's [build-system] requires."""
    if project.build == "kiln":
        from ..resources import requirements_path

        return ["--require-hashes", "-r", str(requirements_path("build.lock"))]
    from ..build_env import backend_requirements

    return backend_requirements(project)


def install_build_requirements(project: KilnProject, python: Path) -> list[str]:
    """Install build_requirements(project) into `python` with its pip (before-build, in the build's Python);
    the pip arguments, [] when there was nothing to install. CalledProcessError when pip fails."""
    arguments = build_requirements(project)
    if arguments:
        subprocess.run([str(python), "-m", "pip", "install", *arguments], check=True)
    return arguments
