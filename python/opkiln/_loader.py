"""Load opkiln._C: preflight first, explain a failed load, then prove every op in the manifest is registered."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch

from . import _preflight
from ._build_info import build_info
from ._preflight import OpkilnEnvironmentError

# The earlier name of the same error; kept so `except OpkilnLoadError` keeps working.
OpkilnLoadError = OpkilnEnvironmentError


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


def _refuse_second_copy(info: dict[str, Any], env: _preflight.Environment, manifest: list[str]) -> None:
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
    sources = sorted(str(lib) for lib in getattr(torch.ops, "loaded_libraries", ()) if "_C" in Path(lib).name)
    sources += sorted(
        str(getattr(module, "__file__", "")) for name, module in list(sys.modules.items())
        if name != "opkiln._C" and name.rsplit(".", 1)[-1] == "_C" and "opkiln" in str(getattr(module, "__file__", "")))
    where = f" (loaded from {', '.join(sources)})" if sources else ""
    raise _preflight.environment_error(
        info, env,
        [f"another copy of opkiln's library is already loaded in this process{where}: it registered "
         f"{', '.join(present)}",
         "loading this copy too would abort the process (torch allows one TORCH_LIBRARY per namespace)"],
        "opkiln cannot be imported: another copy of it is already loaded.",
        fix=("load only one copy: remove the other one, or stop loading it (`python -m opkiln doctor` lists copies):",
             "rm -rf " + " ".join(sources) if sources else _preflight.DOCTOR_COMMAND),
    )


def load_library() -> None:
    """Import opkiln._C or raise OpkilnEnvironmentError; never let a raw loader error through."""
    info = build_info()
    env = _preflight.current_environment()
    if not _preflight.skip_requested():
        _preflight.check(info, env)
    manifest = list(info.get("ops", []))
    if "opkiln._C" not in sys.modules:
        _refuse_second_copy(info, env, manifest)
    try:
        importlib.import_module("opkiln._C")
    except (ImportError, OSError) as exc:
        raise _preflight.environment_error(
            info, env, _preflight.explain_load_failure(exc, info, env),
            "opkiln cannot be imported: its compiled library failed to load.",
            loader_error=_preflight.loader_error_text(exc),
        ) from None
    missing = missing_ops(manifest)
    if missing:
        raise _preflight.environment_error(
            info, env,
            [f"opkiln._C loaded, but these operators are not registered: {', '.join(missing)}",
             "the installed files do not match the build, or another copy of opkiln's _C shadows this one"],
            "opkiln cannot be imported: operators from its build manifest are missing.",
        )
