"""`kiln sdist`: the project's one source distribution per version, unlabelled (``<name>-<version>.tar.gz``).

The sdist is scikit-build-core's, made in a build venv of the project with kiln's metadata provider told it makes
an sdist (KILN_SDIST=1): the plain version and an unpinned torch. A user whose combination the index lacks runs
``pip install <pkg> --no-binary <pkg> --no-build-isolation``; the build from the sdist pins the wheel to the torch
it finds and keeps the plain version (kiln_tool.build_metadata says why).

Its default folder is build/sdist/, not dist/: `kiln index` and `kiln release` take dist/ as wheels only and refuse
any other file there; they publish the sdist given by `--sdist build/sdist/<name>-<version>.tar.gz` (index/sdists.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

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
    from ..build_env import BuildEnvError, ensure_build_env
    from ..matrix_data import local_builds
    from ..pipeline import build_environment, tail
    from ..project import current_project

    project = current_project()
    if project.build != "kiln":
        raise SdistError(f"build = {project.build!r}: kiln sdist makes the sdist of kiln's CMake build only "
                         "(a setup.py backend's sdist is not made yet)")
    if project.version is None:
        raise SdistError("tool.kiln: an sdist needs the base version (version or version-file)")
    want = sdist_filename(project.wheel_name, project.version)
    spec = local_builds(project.matrix_file)[0]  # any build venv: the sdist needs scikit-build-core, not torch
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        python = ensure_build_env(spec, log, project)
    except BuildEnvError as exc:
        raise SdistError(f"build venv {spec.name}: {exc}") from None
    env = build_environment(spec, python, project, {"KILN_SDIST": "1"})
    dist.mkdir(parents=True, exist_ok=True)
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
