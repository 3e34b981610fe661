"""Load the package's libraries: preflight first, explain a failed load, then prove every op of the manifest
is registered. Each library is declared in the build info: a Python extension module (imported) or a
library for ``torch.ops.load_library``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch

from . import preflight
from .buildinfo import PACKAGE, build_info, doctor_command, library_files, module_name, targets


def missing_ops(manifest: list[str]) -> list[str]:
    missing = []
    for qualified in manifest:
        namespace, _, name = qualified.partition("::")
        if not torch._C._dispatch_has_kernel(qualified) and not _has_schema(namespace, name):
            missing.append(qualified)
    return missing


def _has_schema(namespace: str, name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"{namespace}::{name}", "")
    except RuntimeError:
        return False
    return True


def is_loaded(path: str, kind: str) -> bool:
    if kind == "python-module":
        return module_name(path) in sys.modules
    loaded = {str(Path(p).resolve()) for p in getattr(torch.ops, "loaded_libraries", ())}
    return any(str(f.resolve()) in loaded for f in library_files(path))


def _other_sources(declared: list[tuple[str, str]]) -> list[str]:
    """Libraries in this process that look like another copy of ours: same file stem, not our files."""
    stems = {Path(path).name for path, _ in declared}
    ours = {str(f.resolve()) for path, _ in declared for f in library_files(path)}
    sources = sorted(str(lib) for lib in getattr(torch.ops, "loaded_libraries", ())
                     if Path(lib).name.split(".", 1)[0] in stems and str(Path(lib).resolve()) not in ours)
    own_modules = {module_name(path) for path, kind in declared if kind == "python-module"}
    sources += sorted(
        str(getattr(module, "__file__", "")) for name, module in list(sys.modules.items())
        if name not in own_modules and name.rsplit(".", 1)[-1] in stems
        and PACKAGE.split(".")[0] in str(getattr(module, "__file__", "")))
    return sources


def _refuse_second_copy(info: dict[str, Any], env: preflight.Environment, manifest: list[str],
                        declared: list[tuple[str, str]]) -> None:
    """Another copy of our library already registered the namespace: loading ours would abort the process.

    torch's TORCH_LIBRARY throws from a static initializer when a namespace is registered twice, and an
    exception there ends the process (std::terminate), so this must be found before loading.
    """
    # _dispatch_has_kernel is cheap; a schema lookup throws when absent, so only the first op gets one.
    present = [op for op in manifest if torch._C._dispatch_has_kernel(op)]
    if not present and manifest and _has_schema(*manifest[0].split("::", 1)):
        present = manifest[:1]
    if not present:
        return
    sources = _other_sources(declared)
    where = f" (loaded from {', '.join(sources)})" if sources else ""
    raise preflight.environment_error(
        info, env,
        [f"another copy of {PACKAGE}'s library is already loaded in this process{where}: it registered "
         f"{', '.join(present)}",
         "loading this copy too would abort the process (torch allows one TORCH_LIBRARY per namespace)"],
        f"{PACKAGE} cannot be imported: another copy of it is already loaded.",
        fix=(f"load only one copy: remove the other one, or stop loading it (`{doctor_command()}` lists copies):",
             "rm -rf " + " ".join(sources) if sources else doctor_command()),
    )


def _load_one(path: str, kind: str) -> None:
    if kind == "python-module":
        importlib.import_module(module_name(path))
        return
    files = library_files(path)
    if not files:
        raise FileNotFoundError(f"no such library file: {path} with any of this Python's suffixes")
    torch.ops.load_library(str(files[0]))  # type: ignore[no-untyped-call]


def load_libraries() -> None:
    """Load every declared library or raise the package's EnvironmentError; never let a raw loader error
    through."""
    info = build_info()
    env = preflight.current_environment()
    if not preflight.skip_requested():
        preflight.check(info, env)
    manifest = [str(op) for op in info.get("ops", [])]
    declared = targets(info)
    pending = [(path, kind) for path, kind in declared if not is_loaded(path, kind)]
    if pending and len(pending) == len(declared):
        _refuse_second_copy(info, env, manifest, declared)
    for path, kind in pending:
        try:
            _load_one(path, kind)
        except (ImportError, OSError, RuntimeError) as exc:
            raise preflight.environment_error(
                info, env, preflight.explain_load_failure(exc, info, env, path),
                f"{PACKAGE} cannot be imported: its compiled library failed to load ({path}).",
                loader_error=preflight.loader_error_text(exc),
            ) from None
    missing = missing_ops(manifest)
    if missing:
        raise preflight.environment_error(
            info, env,
            [f"{', '.join(p for p, _ in declared)} loaded, but these operators are not registered: "
             f"{', '.join(missing)}",
             f"the installed files do not match the build, or another copy of {PACKAGE}'s library shadows this one"],
            f"{PACKAGE} cannot be imported: operators from its build manifest are missing.",
        )
