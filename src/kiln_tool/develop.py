"""`kiln develop`: the maintainer's loop, an editable install of the project into the venv kiln runs in (or
``--python``), with kiln's import guard present and true to what is installed, for both kinds of build.

- kiln's build (scikit-build-core): ``pip install -e . --no-build-isolation`` with scikit-build-core's
  rebuild on import (``editable.rebuild``) in a build folder that persists (``build/editable/``): after a kernel
  edit, the next ``import <package>`` reruns ninja on what changed (ccache, when installed, compiles). CMake
  installs the guard and the build info as in a wheel.
- the project's own setuptools backend: ``pip install -e . --no-build-isolation`` with kiln's hardened link
  (kiln_tool.backend_build) in a build folder that persists (``build/editable/backend/``, ninja incremental);
  setuptools puts the libraries into the source tree, so kiln writes the guard (``<package>/_kiln/``) and the
  build info (``<package>/_build_info.json``: the torch of that venv, the libraries built, the ops they register
  once loaded) beside them, and lists both in ``.git/info/exclude`` so they are never committed. After a kernel
  edit, run ``kiln develop`` again: while the editable install stands and the build files (pyproject.toml,
  setup.py, setup.cfg, MANIFEST.in), the venv's python and torch and kiln are those of the last full install,
  it runs ``setup.py build_ext --inplace`` alone (one run of setup.py; ninja in ``build/editable/backend/``
  compiles only what changed), not pip's whole editable install (three runs of setup.py, each importing torch,
  and every file compiled again in a temporary folder, ccache aside).

A later ``kiln wheels`` of a setuptools project must not take those two from the source tree: a
``find_packages()`` or ``package_data`` project would carry ``<package>/_kiln/`` (and a ``*.json`` glob the build
info) into the backend's wheel, where kiln writes its own (relabel refuses a wheel that already has them). So a
backend build runs with them moved aside into its build folder (``develop_files_aside``) and put back after it,
whatever the build's outcome; a build killed on the way is put right by the next one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .project import KilnProject

EDITABLE_DIR = "build/editable"


class DevelopError(RuntimeError):
    """One line saying what failed and where its log is (exit 1)."""


def _purelib(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        raise DevelopError(f"{python}: cannot run it ({(out.stderr.strip().splitlines() or ['no output'])[-1]})")
    return Path(out.stdout.strip())


def _environment(project: KilnProject) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KILN_PROJECT_DIR"}
    ccache = shutil.which("ccache")
    if ccache and env.get("KILN_CCACHE", "1") != "0":
        for lang in ("C", "CXX", "CUDA"):
            env.setdefault(f"CMAKE_{lang}_COMPILER_LAUNCHER", ccache)
    return env


def _exclude_from_git(project: KilnProject, paths: list[str]) -> None:
    """List ``paths`` (relative to the project) in the repository's .git/info/exclude, once each."""
    top = subprocess.run(["git", "-C", str(project.root), "rev-parse", "--show-toplevel", "--git-dir"],
                         capture_output=True, text=True, check=False, timeout=30)
    lines = top.stdout.split()
    if top.returncode != 0 or len(lines) != 2:
        return  # not a git work tree: nothing to keep out of commits
    toplevel, git_dir = Path(lines[0]), Path(lines[1])
    git_dir = git_dir if git_dir.is_absolute() else project.root / git_dir
    exclude = git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    present = exclude.read_text().splitlines() if exclude.is_file() else []
    wanted = ["/" + (project.root / p).relative_to(toplevel).as_posix() for p in paths]
    missing = [w for w in wanted if w not in present]
    if missing:
        with exclude.open("a") as fh:
            fh.write("".join(f"{line}\n" for line in ["# kiln develop: the guard and build info it writes", *missing]))


def develop(project: KilnProject, python: Path, log: Path) -> list[str]:
    """Install ``project`` editable into ``python``'s environment; returns what was done, one line each."""
    from .torch_probe import TorchNotFound, find_torch

    purelib = _purelib(python)
    try:
        torch = find_torch([str(purelib)])
    except TorchNotFound as exc:
        raise DevelopError(f"{python}'s environment has no torch to build against ({exc})") from None
    env = _environment(project)
    cmd = [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-v", "-e", str(project.root)]
    stamp, in_place = None, False
    if project.build == "kiln":
        cmd += ["-C", "editable.rebuild=true", "-C", "editable.verbose=false", "-C", f"build-dir={EDITABLE_DIR}"]
    else:
        from .backend_build import prepare

        hardened = prepare(project, project.root / EDITABLE_DIR, env, fresh=False)
        env.update(hardened.env)
        stamp = _stamp(project, python, torch.version)
        in_place = _rebuild_in_place(project, python, hardened.folder, stamp)
        if in_place:
            cmd = [str(python), "setup.py", "build_ext", "--inplace"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=project.root, check=False)
    if proc.returncode != 0:
        from .pipeline import first_error, tail

        shown = first_error(log) or tail(log, 15)
        what = "setup.py build_ext --inplace" if in_place else "pip install -e"
        raise DevelopError(f"{what} failed (exit {proc.returncode}); log: {log}\n{shown}")
    if in_place:
        done = [f"rebuilt {project.name}'s libraries in place (setup.py build_ext --inplace, ninja in "
                f"{EDITABLE_DIR}/backend/): its editable install into {purelib} stands (torch {torch.version})"]
    else:
        done = [f"installed {project.name} editable into {purelib} (torch {torch.version})"]
    if project.build == "backend":
        done += _write_guard(project, python, torch, env)
        if stamp is not None:
            (project.root / EDITABLE_DIR / "backend" / STAMP).write_text(stamp + "\n")
    else:
        done.append(f"rebuilds on import: edit, then `import {project.package}` reruns ninja in {EDITABLE_DIR}/")
    return done


STAMP = "kiln-develop.stamp"
"""What the last full editable install of a backend project was made from (in ``build/editable/backend/``)."""


def _stamp(project: KilnProject, python: Path, torch_version: str) -> str:
    """The editable install's inputs: the project's build files, the venv's python and torch, this kiln."""
    from . import __version__

    digest = hashlib.sha256()
    for name in ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in"):
        path = project.root / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-") + b"\0")
    digest.update("\0".join([str(python), torch_version, __version__]).encode())
    return digest.hexdigest()


def _rebuild_in_place(project: KilnProject, python: Path, folder: Path, stamp: str) -> bool:
    """Whether a setuptools project's next ``kiln develop`` only rebuilds its libraries (``setup.py build_ext
    --inplace``: one run of setup.py, ninja in the build folder that persists) instead of pip's whole editable
    install (three runs of setup.py, each importing torch, and a compile in a fresh temporary folder): when the
    last full install was made here from the same build files, python, torch and kiln, and is still installed."""
    recorded = folder / STAMP
    if not (project.root / "setup.py").is_file() or not recorded.is_file() or recorded.read_text().strip() != stamp:
        return False
    code = ("import importlib.metadata as m, sys\n"
            "try:\n    print(m.distribution(sys.argv[1]).read_text('direct_url.json') or '')\n"
            "except m.PackageNotFoundError:\n    print('')\n")
    out = subprocess.run([str(python), "-c", code, project.name], capture_output=True, text=True, timeout=120,
                         check=False)
    try:
        direct = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}
    except json.JSONDecodeError:
        return False
    editable = isinstance(direct, dict) and isinstance(direct.get("dir_info"), dict) \
        and direct["dir_info"].get("editable") is True
    return editable and direct.get("url") == project.root.as_uri()


def _write_guard(project: KilnProject, python: Path, torch: object, env: dict[str, str]) -> list[str]:
    """The guard and the build info beside the libraries setuptools built into the source tree."""
    from .build_info import GUARD_FOLDER, backend_build_info, guard_files, library_targets, write_build_info
    from .pipeline import PipelineError, libraries_ops
    from .torch_probe import TorchInstall
    from .variant import VariantError, resolve_variant

    assert isinstance(torch, TorchInstall)
    folder = project.root / project.package
    libraries = sorted(p for p in folder.rglob("*.so") if GUARD_FOLDER not in p.relative_to(folder).parts)
    members = [p.relative_to(project.root).as_posix() for p in libraries]
    targets = library_targets(project.package, project.libraries, members)
    if not targets:
        raise DevelopError(f"the editable install left no compiled library in {folder} (setuptools builds "
                           "extensions in place for an editable install)")
    try:
        variant = resolve_variant(torch, env, project)
        ops = libraries_ops(libraries, project, python, env, project.root)
    except (VariantError, PipelineError) as exc:
        raise DevelopError(str(exc).removeprefix("label: ")) from None
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))",
                              project.name], capture_output=True, text=True, timeout=120, check=False).stdout.strip()
    pyver = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=120, check=False).stdout.strip()
    info = backend_build_info(project, torch, variant, pyver, None, ops)
    info.update(version=version, targets=targets)
    guard = folder / GUARD_FOLDER
    guard.mkdir(exist_ok=True)
    for name, data in guard_files().items():
        (guard / name).write_bytes(data)
    write_build_info(info, folder / "_build_info.json")
    _exclude_from_git(project, [f"{project.package}/{GUARD_FOLDER}/", f"{project.package}/_build_info.json"])
    return [f"wrote the guard ({project.package}/{GUARD_FOLDER}/) and the build info ({project.package}/"
            f"_build_info.json: ops {', '.join(ops)}; kept out of git by .git/info/exclude)",
            "after an edit, run `kiln develop` again: ninja compiles only what changed"]


ASIDE = "develop-aside"
"""Where a backend build keeps ``kiln develop``'s files while setuptools runs (inside that build's folder)."""


def _develop_files() -> list[str]:
    from .build_info import GUARD_FOLDER
    from .kiln_wheel import BUILD_INFO

    return [GUARD_FOLDER, BUILD_INFO]


def _put_back(aside: Path, folder: Path) -> None:
    if not aside.is_dir():
        return
    for entry in sorted(aside.iterdir()):
        target = folder / entry.name
        if target.exists() or target.is_symlink():  # written again meanwhile (a kiln develop): that one is current
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        else:
            shutil.move(str(entry), str(target))
    aside.rmdir()


@contextmanager
def develop_files_aside(project: KilnProject, build_dir: Path) -> Iterator[list[str]]:
    """Move ``kiln develop``'s guard folder and build info out of ``project``'s package folder into
    ``<build_dir>/develop-aside/`` for the duration of a backend build; yields the names moved. They go back when
    the block ends, however it ends; what an earlier, killed build left aside goes back first."""
    folder = project.root / project.package
    aside = build_dir / ASIDE
    _put_back(aside, folder)
    moved: list[str] = []
    try:
        for name in _develop_files():
            path = folder / name
            if path.exists() or path.is_symlink():
                aside.mkdir(parents=True, exist_ok=True)
                shutil.move(str(path), str(aside / name))
                moved.append(name)
        yield moved
    finally:
        _put_back(aside, folder)


__all__ = ["DevelopError", "develop", "develop_files_aside"]
