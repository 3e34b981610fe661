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


def _other_copies(declared: list[tuple[str, str]]) -> tuple[list[Path], list[Path]]:
    """(libraries in this process that may be another copy of ours, those proven to be one).

    Candidates: a library torch loaded, or a loaded module, with one of our libraries' file names that is not
    our file. Proven: an installed distribution's RECORD lists the very file (same inode, not a similar path)
    and that distribution is ours (by name) or installs our package's folder. A module merely named ``_C``
    under a path that contains our name (torch's own ``_C``) is never proven."""
    from . import record
    from .buildinfo import site_root

    stems = {Path(path).name for path, _ in declared}
    ours = {f.resolve() for path, _ in declared for f in library_files(path)}
    own_modules = {module_name(path) for path, kind in declared if kind == "python-module"}
    candidates: dict[Path, None] = {}
    for lib in getattr(torch.ops, "loaded_libraries", ()):
        path = Path(lib)
        if path.name.split(".", 1)[0] in stems and path.resolve() not in ours:
            candidates[path] = None
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name not in own_modules and name.rsplit(".", 1)[-1] in stems and isinstance(file, str) and file:
            path = Path(file)
            if path.resolve() not in ours and path.is_file():
                candidates[path] = None
    dist = str(build_info().get("project") or PACKAGE.split(".")[0])
    proven = [path for path in candidates if record.copy_owner(path, [site_root()], dist, PACKAGE) is not None]
    # Only a loaded library with our file name, or a proven copy, is worth naming in the message.
    named = [p for p in candidates if p in proven or str(p) in map(str, getattr(torch.ops, "loaded_libraries", ()))]
    return named, proven


def _removal_fix(proven: list[Path]) -> tuple[str, str]:
    """(reason, command) that removes the proven other copies: ``rm -f --`` of exactly those files, each one
    listed in an installed distribution's RECORD; the doctor when none is proven."""
    from . import shell

    shown = []
    for path in proven:
        try:
            shown.append(shell.printable(str(path), "a library path"))
        except shell.UnsafeValue:
            continue
    if not shown:
        return (f"load only one copy: stop loading the other one (`{doctor_command()}` lists the copies it can "
                "prove and how to remove them):", doctor_command())
    return ("load only one copy: remove the other one (each file below is listed in its distribution's RECORD), "
            f"or stop loading it (`{doctor_command()}` lists copies):", shell.command("rm", "-f", "--", *shown))


def _refuse_second_copy(info: dict[str, Any], env: preflight.Environment, manifest: list[str],
                        declared: list[tuple[str, str]]) -> None:
    """Another copy of our library already registered the namespace: loading ours would abort the process.

    torch's TORCH_LIBRARY throws from a static initializer when a namespace is registered twice, and an
    exception there ends the process (std::terminate), so this must be found before loading.
    """
    from . import shell

    # _dispatch_has_kernel is cheap; a schema lookup throws when absent, so only the first op gets one.
    present = [op for op in manifest if torch._C._dispatch_has_kernel(op)]
    if not present and manifest and _has_schema(*manifest[0].split("::", 1)):
        present = manifest[:1]
    if not present:
        return
    named, proven = _other_copies(declared)
    shown = [str(p) if str(p).isprintable() else shell.shown(str(p), 300) for p in named]
    where = f" (loaded from {', '.join(shown)})" if shown else ""
    raise preflight.environment_error(
        info, env,
        [f"another copy of {PACKAGE}'s library is already loaded in this process{where}: it registered "
         f"{', '.join(present)}",
         "loading this copy too would abort the process (torch allows one TORCH_LIBRARY per namespace)"],
        f"{PACKAGE} cannot be imported: another copy of it is already loaded.",
        fix=_removal_fix(proven),
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
