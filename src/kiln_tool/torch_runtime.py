"""The runtime wheels of torch that the extension links, as torch's own METADATA pins them.

A build installs torch with ``--no-deps`` (its headers and libraries are all a compile needs, the
CUDA runtime wheels are GBs). But the extension links libcudart directly, and repair and audit must
see the very library it will load. `link_requirements()` reads the installed torch's Requires-Dist
(never importing torch), evaluates each marker for this interpreter, and keeps the requirement that
provides each library of data/torch_runtime.json, with torch's version pin, narrowed to that
library (``cuda-toolkit[cublas,cudart,...]==13.0.3`` -> ``cuda-toolkit[cudart]==13.0.3``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from . import resources

RUNTIME_FILE = resources.data_path("torch_runtime.json")


class TorchRuntimeError(RuntimeError):
    """No torch here, or its METADATA does not say how to get a linked library: exit 2."""


@dataclass(frozen=True)
class LinkRequirement:
    library: str
    requirement: str
    source: str
    """The Requires-Dist line of torch it comes from."""


def _linked() -> dict[str, dict[str, object]]:
    data = json.loads(RUNTIME_FILE.read_text())
    if data.get("schema_version") != 1 or not isinstance(data.get("linked"), dict):
        raise TorchRuntimeError(f"{RUNTIME_FILE}: schema_version 1 with a 'linked' table expected")
    return dict(data["linked"])


def torch_distribution(path: list[str] | None = None) -> metadata.Distribution:
    found = list(metadata.distributions(name="torch", path=path) if path is not None
                 else metadata.distributions(name="torch"))
    if not found:
        raise TorchRuntimeError("no torch is installed for this interpreter")
    return found[0]


def is_cuda_torch(dist: metadata.Distribution) -> bool:
    """A CUDA build: its local version says cuXYZ, or it ships libc10_cuda (PyPI's CUDA wheels have no label)."""
    if "+cu" in dist.version:
        return True
    return any(Path(str(f)).name == "libc10_cuda.so" for f in (dist.files or ()))


def link_requirements(requires: list[str], cuda: bool, environment: dict[str, str] | None = None
                      ) -> list[LinkRequirement]:
    """For each linked library, the requirement of `requires` (torch's Requires-Dist) that provides it."""
    env = {"extra": "", **(environment or {})}
    result: list[LinkRequirement] = []
    for library, spec in _linked().items():
        if spec.get("cuda_only") and not cuda:
            continue
        names = {canonicalize_name(str(n)) for n in spec.get("distributions", [])}  # type: ignore[attr-defined]
        meta = spec.get("metapackage")
        assert meta is None or isinstance(meta, dict)
        found: LinkRequirement | None = None
        for line in requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = canonicalize_name(req.name)
            if name in names:
                found = LinkRequirement(library, f"{req.name}{req.specifier}", line)
            elif meta and name == canonicalize_name(str(meta["name"])) and str(meta["extra"]) in req.extras:
                found = LinkRequirement(library, f"{req.name}[{meta['extra']}]{req.specifier}", line)
            if found:
                break
        if found is None:
            raise TorchRuntimeError(
                f"torch's METADATA names no requirement that provides {library} ({spec.get('soname')}); "
                f"looked for {', '.join(sorted(names))}" + (f" or {meta['name']}[{meta['extra']}]" if meta else "")
                + " (data/torch_runtime.json)")
        result.append(found)
    return result


def installed_link_requirements(path: list[str] | None = None, variant: str | None = None
                                ) -> tuple[str, list[LinkRequirement]]:
    """`variant`: KILN_VARIANT (default: from the environment). CPU kernels (``cpu``) link no CUDA
    library, whatever the torch is built for."""
    import os

    dist = torch_distribution(path)
    requested = (variant if variant is not None else os.environ.get("KILN_VARIANT", "auto")).strip().lower()
    cuda = is_cuda_torch(dist) and requested != "cpu"
    return dist.version, link_requirements(list(dist.requires or []), cuda)
