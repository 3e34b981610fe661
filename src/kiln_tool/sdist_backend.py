"""The PEP 517 backend of a setup.py project's sdist made by `kiln sdist` (``build = "backend"``).

`kiln sdist` names this module as the sdist's ``build-backend`` and keeps the project's own backend in the sdist's
``[tool.kiln-sdist] backend``. A user whose torch the index has no page for runs ``pip install <pkg> --no-binary
<pkg> --no-build-isolation`` in a venv holding torch and torch-kiln; this backend then has the project's backend
build the wheel (linked hardened as `kiln wheels` links it: backend_build.prepare), and gives it what `kiln wheels`
gives a backend's wheel (kiln_tool.relabel): the torch pin and the build info for the torch it found, the op
manifest from what the built libraries register, and the import guard. The version stays the sdist's plain one:
pip discards a wheel whose version differs from the sdist's file name (build_metadata says so for kiln's build).
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TABLE = "kiln-sdist"
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"


class SdistBackendError(RuntimeError):
    pass


def original_backend_name(root: Path) -> str:
    doc = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    name = doc.get("tool", {}).get(TABLE, {}).get("backend")
    if not isinstance(name, str) or not name:
        raise SdistBackendError(f"pyproject.toml: [tool.{TABLE}] backend is missing (this sdist was not made by "
                                "kiln sdist)")
    return name


def _original() -> Any:
    name = original_backend_name(Path.cwd())
    module, _, attribute = name.partition(":")
    backend: Any = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        backend = getattr(backend, part)
    return backend


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    hook = getattr(_original(), "get_requires_for_build_wheel", None)
    return list(hook(config_settings)) if hook else []


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    hook = getattr(_original(), "get_requires_for_build_sdist", None)
    return list(hook(config_settings)) if hook else []


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    return str(_original().build_sdist(sdist_directory, config_settings))


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    """The project's backend builds the wheel against the torch this Python finds; kiln pins it to that torch,
    adds the build info and the guard, and keeps the sdist's version."""
    del metadata_directory  # no prepare_metadata hook: the metadata is the finished wheel's
    from .backend_build import prepare
    from .build_info import backend_build_info
    from .pipeline import PipelineError, registered_ops
    from .project import load_project
    from .relabel import RelabelError, relabel_wheel
    from .torch_probe import TorchNotFound, find_torch
    from .variant import VariantError, local_label, resolve_variant, torch_requirement

    project = load_project(Path.cwd())
    try:
        torch = find_torch()
        variant = resolve_variant(torch, dict(os.environ), project)
    except (TorchNotFound, VariantError) as exc:
        raise SdistBackendError(f"kiln: {exc}") from None
    if variant.mode != "torch":
        raise SdistBackendError("kiln: a setup.py project's wheel is built per torch minor (abi = [\"torch\"])")
    with tempfile.TemporaryDirectory(prefix="kiln-sdist-build-") as tmp:
        hardened = prepare(project, Path(tmp), dict(os.environ))
        saved = {name: os.environ.get(name) for name in hardened.env}
        os.environ.update(hardened.env)
        try:
            built = Path(tmp) / str(_original().build_wheel(tmp, config_settings))
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip() or "315532800"
        try:
            ops = registered_ops(built, project, Path(sys.executable), dict(os.environ))
            info = backend_build_info(project, torch, variant, python, None, ops)
            wheel = relabel_wheel(built, Path(tmp) / "kiln", package=project.package, project=project.name,
                                  local_label=local_label(torch, variant), keep_version=True,
                                  torch_requirement=torch_requirement(torch, variant, ""), build_info=info, epoch=epoch)
        except (PipelineError, RelabelError) as exc:
            raise SdistBackendError(f"kiln: {exc}") from None
        shutil.move(str(wheel), Path(wheel_directory) / wheel.name)
        return wheel.name
