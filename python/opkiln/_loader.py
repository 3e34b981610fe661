"""Load opkiln._C and prove that every op in the build manifest is registered."""

from __future__ import annotations

import importlib

import torch

from ._build_info import build_info


class OpkilnLoadError(ImportError):
    pass


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
    importlib.import_module("opkiln._C")
    missing = missing_ops(build_info()["ops"])
    if missing:
        raise OpkilnLoadError(
            f"opkiln loaded its library but these operators are not registered: {', '.join(missing)}. "
            "The installed files do not match the build; reinstall opkiln."
        )
