"""`kiln sdist`: the project's one source distribution per version, unlabelled (``<name>-<version>.tar.gz``).

The sdist is scikit-build-core's, made in a build venv of the project with kiln's metadata provider told it makes
an sdist (KILN_SDIST=1): the plain version and an unpinned torch. A user whose combination the index lacks runs
``pip install <pkg> --no-binary <pkg> --no-build-isolation``; the build from the sdist pins the wheel to the torch
it finds and keeps the plain version (kiln_tool.build_metadata says why).

A setup.py project's (``build = "backend"``) is its own backend's sdist, made in the build venv, held to the same
rules (the plain version, torch not pinned) and given kiln_tool.sdist_backend as its build backend (the project's own
kept in ``[tool.kiln-sdist]``): a build from it is pinned, described and guarded like a `kiln wheels` wheel. Its
members are re-packed in order, dated by SOURCE_DATE_EPOCH, so the same commit gives the same bytes.

Its default folder is build/sdist/, not dist/: `kiln index` and `kiln release` take dist/ as wheels only and refuse
any other file there; they publish the sdist given by `--sdist build/sdist/<name>-<version>.tar.gz` (index/sdists.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..sdist_backend import LEGACY_BACKEND, TABLE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from ..project import KilnProject

HELP = "make the project's unlabelled sdist (<name>-<version>.tar.gz) in its build/sdist/, for the source fallback"

_BUILD_SDIST = "import sys; from scikit_build_core.build import build_sdist; print(build_sdist(sys.argv[1]))"


class SdistError(RuntimeError):
    pass


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dist", type=Path, default=None,
                        help="output folder (default: build/sdist/; not dist/, which kiln index takes as wheels only; "
                             "kiln index/release --sdist publish it)")


def sdist_filename(name: str, version: str) -> str:
    """The sdist's name as PEP 625 spells it: the normalized name with _ for -, the version as given."""
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    parsed = Version(version)
    if parsed.local is not None:
        raise SdistError(f"version {version} carries a local label; an sdist is for every torch, unlabelled")
    return f"{canonicalize_name(name).replace('-', '_')}-{parsed}.tar.gz"


def make_sdist(dist: Path, log: Path) -> Path:
    from ..pipeline import tail
    from ..project import current_project

    project = current_project()
    if project.build == "backend":
        return _backend_sdist(project, dist, log)
    if project.version is None:
        raise SdistError("tool.kiln: an sdist needs the base version (version or version-file)")
    want = sdist_filename(project.wheel_name, project.version)
    python, env = _sdist_build_env(project, dist, log)
    with tempfile.TemporaryDirectory(prefix=".kiln-sdist-", dir=dist) as tmp:
        with log.open("a") as fh:
            fh.write(f"$ {python} -c {_BUILD_SDIST!r} {tmp}\n")
            fh.flush()
            proc = subprocess.run([str(python), "-c", _BUILD_SDIST, tmp], stdout=fh, stderr=subprocess.STDOUT,
                                  env=env, cwd=project.root, check=False)
        if proc.returncode != 0:
            raise SdistError(f"scikit-build-core's build_sdist failed (exit {proc.returncode}); last lines of "
                             f"{log}:\n{tail(log)}")
        made = sorted(Path(tmp).glob("*.tar.gz"))
        if [p.name for p in made] != [want]:
            raise SdistError(f"expected {want}, scikit-build-core made {[p.name for p in made]}")
        target = dist / want
        made[0].replace(target)
    return target


def _sdist_build_env(project: KilnProject, dist: Path, log: Path) -> tuple[Path, dict[str, str]]:
    """The python of the first local build venv (any: an sdist needs the build backend, not torch) and its build
    environment told it makes an sdist (KILN_SDIST=1); ``log`` and ``dist`` exist afterwards."""
    from ..build_env import BuildEnvError, ensure_build_env
    from ..matrix_data import local_builds
    from ..pipeline import build_environment

    spec = local_builds(project.matrix_file)[0]
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        python = ensure_build_env(spec, log, project)
    except BuildEnvError as exc:
        raise SdistError(f"build venv {spec.name}: {exc}") from None
    env = build_environment(spec, python, project, {"KILN_SDIST": "1"})
    dist.mkdir(parents=True, exist_ok=True)
    return python, env


_BACKEND_SDIST = ("import importlib, sys\n"
                  "module, _, attr = sys.argv[2].partition(':')\n"
                  "backend = importlib.import_module(module)\n"
                  "for part in filter(None, attr.split('.')):\n"
                  "    backend = getattr(backend, part)\n"
                  "print(backend.build_sdist(sys.argv[1]))\n")


def _backend_sdist(project: KilnProject, dist: Path, log: Path) -> Path:
    """The project's own backend's sdist, checked and given kiln's build backend (module docstring)."""
    from ..pipeline import first_error, tail

    build_system = _pyproject(project.root).get("build-system", {})
    if "backend-path" in build_system:
        raise SdistError("pyproject.toml: [build-system] backend-path (an in-tree backend) is not supported by kiln "
                         "sdist")
    backend = str(build_system.get("build-backend") or LEGACY_BACKEND)
    python, env = _sdist_build_env(project, dist, log)
    from ..develop import develop_files_aside

    with tempfile.TemporaryDirectory(prefix=".kiln-sdist-", dir=dist) as tmp:
        # kiln develop's guard and build info are the maintainer's editable install, never the sdist's (the build
        # from the sdist writes its own, and relabel refuses a package that already ships them).
        with log.open("a") as fh, develop_files_aside(project, project.root / "build" / "sdist-build"):
            fh.write(f"$ {python} -c <build_sdist of {backend}> {tmp}\n")
            fh.flush()
            proc = subprocess.run([str(python), "-c", _BACKEND_SDIST, tmp, backend], stdout=fh,
                                  stderr=subprocess.STDOUT, env=env, cwd=project.root, check=False)
        if proc.returncode != 0:
            raise SdistError(f"{backend}'s build_sdist failed (exit {proc.returncode}); in {log}:\n"
                             f"{first_error(log) or tail(log)}")
        made = sorted(Path(tmp).glob("*.tar.gz"))
        if len(made) != 1:
            raise SdistError(f"{backend}'s build_sdist made {[p.name for p in made]}, not one .tar.gz")
        version = _pkg_info_version(made[0])
        want = sdist_filename(project.wheel_name, version)
        target = Path(tmp) / "kiln" / want
        target.parent.mkdir()
        _repack(made[0], target, backend, env.get("SOURCE_DATE_EPOCH", "315532800"))
        from ..index.errors import IndexInputError
        from ..index.sdists import inspect_sdist

        try:  # what kiln index --sdist will demand of it: the plain version, torch not pinned, members in place
            inspect_sdist(want, target, "", target.stat().st_size, project.name)
        except IndexInputError as exc:
            raise SdistError(str(exc)) from None
        final = dist / want
        target.replace(final)
    return final


def _pyproject(root: Path) -> dict[str, Any]:
    return dict(tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")))


def _pkg_info_version(sdist: Path) -> str:
    """The Version of the sdist's PKG-INFO (top folder), unlabelled."""
    from packaging.version import InvalidVersion, Version

    with tarfile.open(sdist, "r:gz") as tar:
        infos = [m for m in tar.getmembers() if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
        handle = tar.extractfile(infos[0]) if len(infos) == 1 else None
        text = handle.read().decode("utf-8", "replace") if handle is not None else ""
    version = next((line[len("Version:"):].strip() for line in text.split("\n\n", 1)[0].splitlines()
                    if line.startswith("Version:")), "")
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise SdistError(f"{sdist.name}: no PKG-INFO with a version") from None
    if parsed.local is not None:
        raise SdistError(f"the backend's sdist has version {version}, with a local label; an sdist is for every "
                         "torch, unlabelled")
    return str(parsed)


def with_kiln_backend(text: str, backend: str) -> str:
    """pyproject.toml with kiln_tool.sdist_backend as its build backend and the project's own kept in
    [tool.kiln-sdist]; every other key as it was (checked by reading the result back)."""
    doc = tomllib.loads(text)
    build_system = dict(doc.get("build-system", {}))
    requires = [str(r) for r in build_system.get("requires", ["setuptools"])]
    if not any(r.split(";")[0].replace(" ", "").lower().startswith(("torch-kiln", "torch_kiln")) for r in requires):
        requires.append("torch-kiln")
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        header = line.strip()
        if header.startswith("["):
            skipping = header.replace(" ", "") in ("[build-system]", f"[tool.{TABLE}]")
        if not skipping:
            kept.append(line)
    new = "\n".join(kept).rstrip() + "\n\n[build-system]\nrequires = [" + ", ".join(
        json.dumps(r) for r in requires) + f"]\nbuild-backend = \"kiln_tool.sdist_backend\"\n\n[tool.{TABLE}]\n" \
        f"backend = {json.dumps(backend)}\n"
    try:
        again = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        again = None
    expected = {k: v for k, v in doc.items() if k != "build-system"}
    expected.setdefault("tool", {})
    expected["tool"] = {**expected["tool"], TABLE: {"backend": backend}}
    expected["build-system"] = {"requires": requires, "build-backend": "kiln_tool.sdist_backend"}
    if again != expected:
        raise SdistError("pyproject.toml: could not name kiln's build backend in it without changing other keys")
    return new


def _repack(source: Path, target: Path, backend: str, epoch: str) -> None:
    """The backend's sdist with kiln's build backend in its pyproject.toml, members in name order, owned by no
    one, dated ``epoch``, gzip without a time stamp: the same commit gives the same bytes."""
    import gzip
    import io

    mtime = max(int(epoch), 315532800)
    stem = target.name.removesuffix(".tar.gz")
    with tarfile.open(source, "r:gz") as tar:
        members = [m for m in tar.getmembers()]
        top = {m.name.split("/", 1)[0] for m in members}
        if top != {stem}:
            raise SdistError(f"the backend's sdist holds {sorted(top)[:3]}, not one folder {stem}/")
        files: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
        for member in members:
            if member.isfile():
                handle = tar.extractfile(member)
                files[member.name] = (member, handle.read() if handle is not None else b"")
            elif member.isdir():
                files[member.name] = (member, None)
            else:
                raise SdistError(f"the backend's sdist holds {member.name!r}, neither a file nor a folder")
    pyproject = f"{stem}/pyproject.toml"
    if pyproject not in files or files[pyproject][1] is None:
        raise SdistError("the backend's sdist has no pyproject.toml")
    info, data = files[pyproject]
    files[pyproject] = (info, with_kiln_backend((data or b"").decode("utf-8"), backend).encode("utf-8"))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as out:
        for name in sorted(files):
            member, content = files[name]
            fresh = tarfile.TarInfo(name)
            fresh.mtime, fresh.uid, fresh.gid, fresh.uname, fresh.gname = mtime, 0, 0, "", ""
            if content is None:
                fresh.type, fresh.mode = tarfile.DIRTYPE, 0o755
                out.addfile(fresh)
            else:
                fresh.size, fresh.mode = len(content), 0o755 if member.mode & 0o111 else 0o644
                out.addfile(fresh, io.BytesIO(content))
    with target.open("xb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
        gz.write(raw.getvalue())


def execute(args: argparse.Namespace) -> int:
    from ..project import ProjectError, current_project

    try:
        project = current_project()
        dist = args.dist or project.root / "build" / "sdist"
        target = make_sdist(dist, project.root / "build" / "logs" / "sdist.log")
    except (SdistError, ProjectError) as exc:
        print(f"kiln sdist: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, SdistError) else 2
    print(target)
    return 0
