"""CycloneDX 1.6 SBOM of the build toolchain, shipped in the wheel's .dist-info/sboms/.

Names what built the wheel (C++ compiler, nvcc, CMake, Ninja,
scikit-build-core, torch, Python) with exact versions. Deterministic: no time
stamp beyond SOURCE_DATE_EPOCH, serial number derived from the contents.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

TOOL_PURLS = {
    "scikit-build-core": "pkg:pypi/scikit-build-core@{v}",
    "cmake": "pkg:pypi/cmake@{v}",
    "ninja": "pkg:pypi/ninja@{v}",
    "torch": "pkg:pypi/torch@{v}",
    "pyelftools": "pkg:pypi/pyelftools@{v}",
}


def _component(name: str, version: str, kind: str, description: str) -> dict[str, Any]:
    comp: dict[str, Any] = {"type": kind, "name": name, "version": version, "description": description,
                            "bom-ref": f"{canonicalize_name(name)}@{version}"}
    purl = TOOL_PURLS.get(name)
    if purl:
        comp["purl"] = purl.format(v=version)
    return comp


def make_sbom(build_info: dict[str, Any], tools: dict[str, str]) -> dict[str, Any]:
    version = str(build_info["version"])
    project = str(build_info["project"])
    descriptions = {
        "compiler": ("application", "C++ compiler"),
        "nvcc": ("application", "CUDA compiler (nvcc)"),
        "cmake": ("application", "build system generator"),
        "ninja": ("application", "build tool"),
        "scikit-build-core": ("library", "PEP 517 build backend"),
        "torch": ("framework", "PyTorch the extension is compiled against (headers and libraries)"),
        "python": ("application", "Python interpreter of the build"),
        "pyelftools": ("library", "reads torch's ABI flag during configuration"),
    }
    components = []
    for key, value in sorted(tools.items()):
        if not value:
            continue
        kind, description = descriptions.get(key, ("application", key))
        name = key
        if key == "compiler":
            name, _, value = value.partition(" ")
            name = {"GNU": "gcc", "Clang": "clang"}.get(name, name.lower())
        components.append(_component(name, value, kind, description))
    body: dict[str, Any] = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "version": 1,
        "metadata": {
            "component": {"type": "library", "name": project, "version": version,
                          "bom-ref": f"{project}@{version}", "purl": f"pkg:pypi/{project}@{version}",
                          "properties": [{"name": "kiln:git_commit", "value": str(build_info["git_commit"])},
                                         {"name": "kiln:source_hash", "value": str(build_info["source_hash"])}]},
            "lifecycles": [{"phase": "build"}],
        },
        "components": components,
        "dependencies": [{"ref": f"{project}@{version}", "dependsOn": [c["bom-ref"] for c in components]}],
    }
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        body["metadata"]["timestamp"] = dt.datetime.fromtimestamp(int(epoch), tz=dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "kiln-sbom:" + json.dumps(body, sort_keys=True))
    return {"$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json", **body, "serialNumber": f"urn:uuid:{serial}"}


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


def main(argv: list[str] | None = None) -> int:
    import platform

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-info", type=Path, required=True)
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--compiler", required=True)
    p.add_argument("--nvcc-version", default="")
    p.add_argument("--cmake-version", required=True)
    p.add_argument("--ninja-version", default="")
    p.add_argument("--scikit-build-core-version", default="")
    args = p.parse_args(argv)
    info = json.loads(args.build_info.read_text())
    tools = {
        "compiler": args.compiler,
        "nvcc": args.nvcc_version,
        "cmake": args.cmake_version,
        "ninja": args.ninja_version.strip(),
        "scikit-build-core": args.scikit_build_core_version or _dist_version("scikit-build-core"),
        "torch": str(info["torch_version"]),
        "python": platform.python_version(),
        "pyelftools": _dist_version("pyelftools"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(make_sbom(info, tools), indent=2, sort_keys=True) + "\n")
    tmp.replace(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
