"""Load opkiln._C: preflight first, explain a failed load, then prove every op in the manifest is registered."""

from __future__ import annotations

import importlib

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


def load_library() -> None:
    """Import opkiln._C or raise OpkilnEnvironmentError; never let a raw loader error through."""
    info = build_info()
    env = _preflight.current_environment()
    if not _preflight.skip_requested():
        _preflight.check(info, env)
    try:
        importlib.import_module("opkiln._C")
    except (ImportError, OSError) as exc:
        raise _preflight.environment_error(
            info, env, _preflight.explain_load_failure(exc, info, env),
            "opkiln cannot be imported: its compiled library failed to load.",
            loader_error=_preflight.loader_error_text(exc),
        ) from None
    missing = missing_ops(list(info.get("ops", [])))
    if missing:
        raise _preflight.environment_error(
            info, env,
            [f"opkiln._C loaded, but these operators are not registered: {', '.join(missing)}",
             "the installed files do not match the build, or another copy of opkiln's _C shadows this one"],
            "opkiln cannot be imported: operators from its build manifest are missing.",
        )
