"""Build -> (label) -> repair -> audit -> dist/, for one combination of the configured project at a time.

The project (kiln_tool.project) builds either with kiln's CMake API through scikit-build-core (the
version label and torch pin come from kiln's metadata provider), or with its own PEP 517 backend, after
which kiln sets the label and the pin and adds the build info (kiln_tool.relabel). Either way the wheel
is then repaired and audited. A wheel reaches dist/ only when it passed every step; it is moved there
atomically, so dist/ never holds a partial or failing wheel. A wheel that was built and repaired but
fails the audit is kept for inspection in dist/audit-failed/ with its report beside it (kiln index and
kiln release take dist/*.whl only, and audit again): a project's own backend cannot be held to every
flag kiln's build sets, and its maintainers see exactly what the audit found and how to fix it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import resources
from .build_env import ensure_build_env, kiln_import_root
from .epoch import source_date_epoch
from .matrix_data import BuildSpec
from .project import KilnProject, current_project, load_project
from .repair import repair_wheel
from .wheel_settings import SOURCE_PATTERNS

if TYPE_CHECKING:
    from .torch_probe import TorchInstall
    from .variant import BuildVariant


REJECTED = "audit-failed"
"""The folder of dist/ that keeps wheels which were built but failed the audit."""


class PipelineError(RuntimeError):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step


@dataclass
class BuildResult:
    spec: BuildSpec
    wheel: Path | None = None
    size: int = 0
    build_seconds: float = 0.0
    verdict: str = "not built"
    detail: str = ""
    log: Path | None = None
    steps: list[str] = field(default_factory=list)
    rejected: Path | None = None
    """The wheel that failed the audit, kept in dist/audit-failed/ with its report (<wheel>.audit.txt)."""

    @property
    def ok(self) -> bool:
        return self.wheel is not None


def build_environment(spec: BuildSpec, python: Path, project: KilnProject,
                      extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one build: the variant, the commit's time, kiln reachable by the build (its
    metadata provider, CMake's Python calls, Kiln_ROOT for find_package(Kiln)), the compiler cache."""
    env = dict(os.environ)
    paths = [str(kiln_import_root(python)), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env.update({
        "KILN_VARIANT": spec.variant_env,
        "SOURCE_DATE_EPOCH": source_date_epoch(project.root),
        "CMAKE_BUILD_PARALLEL_LEVEL": env.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2)),
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": os.pathsep.join(paths),
        "Kiln_ROOT": str(resources.cmake_dir()),
        # torch.utils.cpp_extension's ninja (backend builds): as many jobs as CMake's.
        "MAX_JOBS": env.get("MAX_JOBS", str(os.cpu_count() or 2)),
    })
    env.pop("KILN_PROJECT_DIR", None)  # the build serves the tree it builds, whatever kiln was pointed at
    ccache = shutil.which("ccache")
    if ccache and env.get("KILN_CCACHE", "1") != "0":
        for lang in ("C", "CXX", "CUDA"):
            env.setdefault(f"CMAKE_{lang}_COMPILER_LAUNCHER", ccache)
        # Builds of the same sources from different directories share cache hits.
        env.setdefault("CCACHE_BASEDIR", str(project.root))
        env.setdefault("CCACHE_NOHASHDIR", "1")
    env.update(extra or {})
    return env


def build_wheel(python: Path, spec: BuildSpec, out_dir: Path, log: Path, build_dir: Path,
                env_extra: dict[str, str] | None = None, source: Path | None = None) -> Path:
    """Build the project in ``source`` (default: the configured one) for ``spec`` with the build venv's
    ``python``: one wheel of that project, labelled and pinned (a backend build is labelled here)."""
    project = load_project(source) if source is not None else current_project()
    env = build_environment(spec, python, project, env_extra)
    if project.build == "backend":
        from .backend_build import prepare

        check_schema_sources(project)
        env = {**env, **backend_environment(spec, python, project, env)}
        hardened = prepare(project, build_dir, env)
        env.update(hardened.env)
        with log.open("a") as fh:
            fh.write(f"kiln: setuptools builds in {hardened.folder} (DIST_EXTRA_CONFIG); LDFLAGS={env['LDFLAGS']}"
                     + (" (the project's own version script kept)" if hardened.own_version_script else "") + "\n")
        # torch.utils.cpp_extension compiles through ccache when it finds one; with a CCACHE_BASEDIR, ccache
        # hands the compiler paths relative to setuptools' temp folder, which the prefix maps cannot know.
        for name in ("CCACHE_BASEDIR", "CCACHE_NOHASHDIR"):
            env.pop(name, None)
    cmd = [str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir", "-v",
           "-w", str(out_dir)]
    if project.build == "kiln":
        # Kiln_DIR given, not left to the cache: a build folder configured by another kiln (another venv) would
        # keep that kiln's CMake package, and with it that kiln's Python and torch.
        cmd += ["-C", f"build-dir={build_dir}", "-C", f"cmake.define.Kiln_DIR={resources.cmake_dir()}"]
        if not project.ship_sources:  # the project's own wheel.exclude kept: -C replaces the list
            cmd += ["-C", "wheel.exclude=" + ";".join([*project.wheel_exclude, *SOURCE_PATTERNS])]
    cmd.append(str(project.root))
    from .develop import develop_files_aside

    # A backend build never sees kiln develop's guard and build info in the source package (kiln writes its own).
    aside: contextlib.AbstractContextManager[list[str]] = (
        develop_files_aside(project, build_dir) if project.build == "backend" else contextlib.nullcontext([]))
    with log.open("a") as fh, aside as moved:
        if moved:
            fh.write(f"kiln: kiln develop's {', '.join(moved)} kept out of the build (in {build_dir}/develop-aside/ "
                     "until it ends)\n")
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=project.root)
    if proc.returncode != 0:
        first = first_error(log)
        if first:
            raise PipelineError("build", f"pip wheel failed (exit {proc.returncode}); the first error in {log}:\n"
                                + first)
        raise PipelineError("build", f"pip wheel failed (exit {proc.returncode}); last lines of {log}:\n"
                            + tail(log))
    wheels = sorted(out_dir.glob(f"{project.wheel_name}-*.whl"))
    others = sorted(w.name for w in out_dir.glob("*.whl") if w not in wheels)
    if len(wheels) != 1 or others:
        raise PipelineError("build", f"expected exactly one {project.wheel_name} wheel, got "
                            f"{[w.name for w in wheels] + others}")
    if project.build == "backend":
        return label_backend_wheel(wheels[0], python, spec, project, out_dir / "labelled", env)
    return wheels[0]


def check_schema_sources(project: KilnProject) -> None:
    """Before anything is compiled: each schema-sources pattern matches a file, and each file can be read."""
    from .build_info import schema_sources

    try:
        for path in schema_sources(project):
            path.read_bytes()
    except ValueError as exc:
        raise PipelineError("build", str(exc)) from None
    except OSError as exc:
        raise PipelineError("build", f"tool.kiln.schema-sources: cannot read {exc.filename} ({exc.strerror})") from None


def backend_environment(spec: BuildSpec, python: Path, project: KilnProject, env: dict[str, str]) -> dict[str, str]:
    """What kiln gives a build by the project's own backend without changing what it builds.

    - Prefix maps (CPPFLAGS, which setuptools appends to every compile and link line and torch's
      cpp_extension keeps): the project's tree as ``<package>/`` and torch's as ``torch/`` in __FILE__ and
      in the debug info Python's own ``-g`` asks for, so two checkouts give the same bytes (kiln repro).
    - For CUDA kernels, what torch.utils.cpp_extension reads, from the data kiln's CMake build reads: the
      matrix's arch list (KILN_CUDA_ARCHS overrides it) and the toolkit root (KILN_CUDA_HOME, where the nvcc
      first on PATH is a wrapper: ../shared/notes/toolchain.md).
    Flags that change what the libraries export or how they link are the project's: the audit reports them.
    """
    from .matrix_data import arch_list, cuda_version, load
    from .torch_probe import TorchNotFound, find_torch

    site = sorted((python.parent.parent / "lib").glob("python3*/site-packages"))
    # Python's own headers (torch/extension.h and every Python.h include them) lie in the interpreter's prefix.
    includes = subprocess.run([str(python), "-c", "import sysconfig; p = sysconfig.get_paths(); "
                               "print(p['include']); print(p['platinclude'])"],
                              capture_output=True, text=True, timeout=120, check=False).stdout.split()
    maps = [f"-ffile-prefix-map={include}/=python-include/" for include in sorted(set(includes))]
    maps.append(f"-ffile-prefix-map={project.root}/={project.package}/")
    with contextlib.suppress(TorchNotFound):  # no torch: the build itself says so
        # After the project's map: torch may lie inside the project (.venvs/), and gcc takes the last match.
        maps.append(f"-ffile-prefix-map={Path(find_torch([str(site[0])] if site else []).root)}/=torch/")
    extra = {"CPPFLAGS": " ".join([env.get("CPPFLAGS", ""), *maps]).strip()}
    cuda = cuda_version(spec.cuda)
    if cuda is None:
        return extra
    override = env.get("KILN_CUDA_ARCHS", "").strip()
    archs = override.replace(",", ";") if override else ";".join(
        arch_list(load(project.matrix_file), cuda, platform.machine()))
    extra["TORCH_CUDA_ARCH_LIST"] = archs
    if env.get("KILN_CUDA_HOME"):
        extra["CUDA_HOME"] = env["KILN_CUDA_HOME"]
    return extra


def label_backend_wheel(wheel: Path, python: Path, spec: BuildSpec, project: KilnProject, out_dir: Path,
                        env: dict[str, str]) -> Path:
    """What scikit-build-core and kiln's metadata provider give a kiln build, given to a backend's wheel:
    the local version label, the torch pin and the build info (kiln_tool.relabel), from the build venv's torch."""
    from .torch_probe import TorchNotFound, find_torch
    from .variant import VariantError, resolve_variant

    site = sorted((python.parent.parent / "lib").glob("python3*/site-packages"))
    try:
        torch = find_torch([str(site[0])] if site else [])
        variant = resolve_variant(torch, env, project)
    except (TorchNotFound, VariantError) as exc:
        raise PipelineError("label", str(exc)) from None
    return label_wheel(wheel, out_dir, project, torch, variant, spec.python, env.get("KILN_GIT_COMMIT"),
                       env["SOURCE_DATE_EPOCH"], python, env)


def registered_ops(wheel: Path, project: KilnProject, python: Path, env: dict[str, str]) -> list[str]:
    """The ops of the project's namespace that the wheel's compiled libraries register once ``python`` (the
    build venv's, with its torch) loads them (kiln_tool.registrations): the manifest whatever the registration
    API. When schema-sources are given, every op their m.def(...) define must be among them."""
    import zipfile

    from .build_info import library_targets

    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory(prefix="kiln-ops-") as tmp:
        members = zf.namelist()
        wanted = [t.split("=", 1)[0] for t in library_targets(project.package, project.libraries, members)]
        paths = []
        for target in wanted:
            member = next(m for m in members if m.startswith(f"{target}.") and ".so" in m.rsplit("/", 1)[-1])
            if ".." in member.split("/"):
                raise PipelineError("label", f"{wheel.name}: unsafe member name {member!r}")
            path = Path(tmp) / member
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(zf.read(member))
            paths.append(path)
        if not paths:
            raise PipelineError("label", f"{wheel.name}: no compiled library of {project.package}/ in the wheel")
        return libraries_ops(paths, project, python, env, Path(tmp))


def libraries_ops(paths: list[Path], project: KilnProject, python: Path, env: dict[str, str], cwd: Path) -> list[str]:
    """The ops of the project's namespace that the libraries at ``paths`` register once ``python`` loads them
    (registered_ops says why, and what is checked)."""
    import json

    from .build_info import op_manifest, schema_sources

    # Its source, not `-m kiln_tool.registrations`: the Python beside the torch need not import kiln_tool
    # (kiln label runs with the interpreter of the build, whatever kiln itself runs in). Read, never imported
    # here: kiln itself runs without torch.
    script = Path(__file__).with_name("registrations.py").read_text()
    proc = subprocess.run([str(python), "-c", script, *map(str, paths)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)
    lines = proc.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1]) if lines else {}
    except ValueError:
        doc = {}
    if proc.returncode != 0 or "ops" not in doc:
        why = doc.get("error") or (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise PipelineError("label", f"loading the built libraries in the build venv to list their ops failed: "
                            f"{why}")
    ops = sorted(op for op in doc["ops"] if op.split("::", 1)[0] == project.namespace)
    if not ops:
        others = sorted({op.split("::", 1)[0] for op in doc["ops"]})
        found = f"they register ops in {', '.join(others)}" if others else "they register no op at all"
        raise PipelineError("label", f"the built libraries register no op in torch.ops.{project.namespace} "
                            f"(tool.kiln.namespace); {found}")
    if project.schema_sources:
        try:
            declared = op_manifest(schema_sources(project), project.namespace)
        except (ValueError, OSError):
            declared = []  # sources without m.def(...): the loaded registrations are the manifest
        missing = sorted(set(declared) - set(ops))
        if missing:
            raise PipelineError("label", f"tool.kiln.schema-sources define {', '.join(missing)}, which the built "
                                "libraries do not register")
    return ops


def label_wheel(wheel: Path, out_dir: Path, project: KilnProject, torch: TorchInstall, variant: BuildVariant,
                python: str, commit: str | None, epoch: str, python_exe: Path, env: dict[str, str]) -> Path:
    """Label a backend-built wheel of ``project`` for ``torch`` and ``variant`` (Python ``python``, like 3.11);
    ``python_exe`` (beside that torch) loads its libraries for the op manifest."""
    from .build_info import backend_build_info
    from .relabel import RelabelError, relabel_wheel
    from .variant import local_label, torch_requirement

    if variant.mode != "torch":
        raise PipelineError("label", "a backend build is labelled per torch minor (abi = [\"torch\"]); the "
                            "stable ABI needs kiln's build")
    ops = registered_ops(wheel, project, python_exe, env)
    try:
        info = backend_build_info(project, torch, variant, python, commit, ops)
        if commit:  # a build of a copy without .git (kiln repro): the build's environment says what git would
            info["git_dirty"] = {"1": True, "0": False}.get(env.get("KILN_GIT_DIRTY", "").strip())
        return relabel_wheel(wheel, out_dir, package=project.package, project=project.name,
                             local_label=local_label(torch, variant),
                             torch_requirement=torch_requirement(torch, variant, ""), build_info=info, epoch=epoch)
    except (RelabelError, ValueError, OSError) as exc:
        raise PipelineError("label", str(exc)) from None


# The first line that says why a build stopped: a compiler's or linker's diagnostic, CMake's error, a missing
# tool; the lines after it (an error's context, CMake's message) are shown with it.
_FIRST_ERROR = re.compile(r"(?:^|\s|:)(?:fatal error|error)(?: #?[0-9]+-?D?)?\s*:|^CMake Error|undefined reference to"
                          r"|^\s*(?:ERROR|Error):|command not found|No such file or directory: '[^']*(?:nvcc|g\+\+|gcc|"
                          r"c\+\+|cc)'|(?:^|\s)OSError: ", re.IGNORECASE)
_NOT_FIRST = re.compile(r"ninja: build stopped|error: subprocess-exited-with-error|error: metadata-generation-failed|"
                        r"ERROR: Failed building wheel|ERROR: Failed to build|error: command '[^']+' failed|"
                        r"CalledProcessError|RuntimeError: Error compiling objects|^\s*(?:ERROR|error): "
                        r"(?:Could not build|Failed to build)|-Werror|-Wno-error|\berror\.h\b")


def first_error(path: Path, context: int = 4) -> str:
    """The first diagnostic of the last build in the log (from its last ``$ `` command line) and the lines after
    it; "" when the log holds none that kiln recognises."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    start = max((i for i, line in enumerate(lines) if line.startswith("$ ")), default=0)
    for i in range(start, len(lines)):
        line = lines[i]
        if _FIRST_ERROR.search(line) and not _NOT_FIRST.search(line):
            shown = [line.strip()] + [following.rstrip() for following in lines[i + 1:i + 1 + context]
                                      if not _NOT_FIRST.search(following)]
            return "\n".join(shown)
    return ""


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def audit(wheel: Path, torch_lib: Path | None) -> tuple[bool, str]:
    try:
        from .audit import AuditOptions, audit_paths
    except ImportError:
        return False, "kiln audit is not available in this checkout"
    report = audit_paths([wheel], AuditOptions(torch_lib=torch_lib, cuda_archs=None, policy="manylinux_2_28"))
    return bool(report.ok), report.render_text()


def venv_torch_version(venv: Path) -> str | None:
    """Public version of the torch installed in `venv` (read from disk, not imported)."""
    from .torch_probe import TorchNotFound, find_torch

    site = sorted((venv / "lib").glob("python3*/site-packages"))
    if not site:
        return None
    try:
        return find_torch([str(site[0])]).public_version
    except TorchNotFound:
        return None


def place(wheel: Path, dist: Path) -> Path:
    """Move into dist/ atomically (same filesystem rename)."""
    dist.mkdir(parents=True, exist_ok=True)
    staged = dist / f".{wheel.name}.partial"
    shutil.copyfile(wheel, staged)
    target = dist / wheel.name
    staged.replace(target)
    return target


def run_pipeline(spec: BuildSpec, dist: Path, logs: Path,
                 progress: Callable[[BuildSpec, str], None] | None = None,
                 install_into: Path | None = None, project: KilnProject | None = None) -> BuildResult:
    project = project or current_project()
    result = BuildResult(spec=spec, log=logs / f"{spec.name}.log")
    logs.mkdir(parents=True, exist_ok=True)
    assert result.log is not None
    result.log.write_text("")

    def step(name: str) -> None:
        result.steps.append(name)
        if progress is not None:
            progress(spec, name)

    started = time.perf_counter()
    try:
        step("venv")
        check_schema_sources(project)
        python = ensure_build_env(spec, result.log, project)
        with tempfile.TemporaryDirectory(prefix=f"kiln-{spec.name}-") as tmp:
            step("build")
            built = build_wheel(python, spec, Path(tmp) / "built", result.log, project.root / "build" / spec.name,
                                source=project.root)
            step("repair")
            repaired = repair_wheel(built, Path(tmp) / "repaired")
            step("audit")
            torch_lib = python.parent.parent / "lib" / f"python{spec.python}" / "site-packages" / "torch" / "lib"
            ok, report = audit(repaired, torch_lib if torch_lib.is_dir() else None)
            result.build_seconds = time.perf_counter() - started
            if not ok:
                result.verdict = "audit failed"
                result.detail = report
                result.rejected = place(repaired, dist / REJECTED)
                report_file = result.rejected.with_name(result.rejected.name + ".audit.txt")
                report_file.with_name(report_file.name + ".partial").write_text(report)
                report_file.with_name(report_file.name + ".partial").replace(report_file)
                return result
            step("place")
            for stale in (dist / REJECTED / repaired.name, dist / REJECTED / f"{repaired.name}.audit.txt"):
                stale.unlink(missing_ok=True)
            result.wheel = place(repaired, dist)
            result.size = result.wheel.stat().st_size
            result.verdict = "passed"
            result.detail = report
        if install_into is not None and venv_torch_version(install_into) == spec.torch:
            step("install")
            pip = [str(install_into / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                   "--force-reinstall", str(result.wheel)]
            proc = subprocess.run(pip, capture_output=True, text=True)
            if proc.returncode != 0:
                raise PipelineError("install", proc.stderr.strip())
    except Exception as exc:
        result.build_seconds = time.perf_counter() - started
        result.verdict = f"failed at {result.steps[-1] if result.steps else 'start'}"
        result.detail = str(exc)
    return result
