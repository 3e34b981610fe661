"""What CMake needs to know before project(): the torch to build against and the variant.

``python -m kiln_tool.build_config --format cmake --project-dir DIR`` prints ``set()`` commands (the
project's [tool.kiln] table, the torch beside this Python, the variant); ``--format json`` prints the same
facts for people and tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from .build_metadata import build_version, stable_min_torch
from .matrix_data import MatrixError
from .project import KilnProject, ProjectError, load_project, project_dir
from .torch_probe import TorchInstall, TorchNotFound, find_torch
from .variant import BuildVariant, VariantError, resolve_variant

MIN_CXX_STANDARD = 20


def config_values(torch: TorchInstall, variant: BuildVariant, project: KilnProject) -> dict[str, str]:
    if project.version is None:
        raise ProjectError(["tool.kiln: a kiln build needs the base version (version or version-file)"])
    return {
        "KILN_PROJECT_NAME": project.name,
        "KILN_PACKAGE": project.package,
        "KILN_NAMESPACE": project.namespace,
        "KILN_LIBRARIES": project.libraries,
        "KILN_MATRIX_FILE": str(project.matrix_file),
        "KILN_TORCH_ROOT": torch.root,
        "KILN_TORCH_VERSION": torch.version,
        "KILN_TORCH_PUBLIC_VERSION": torch.public_version,
        "KILN_TORCH_MAJOR_MINOR": torch.major_minor,
        "KILN_TORCH_CUDA": torch.cuda or "",
        "KILN_TORCH_INCLUDE_DIRS": ";".join(torch.include_dirs),
        "KILN_TORCH_LIB_DIR": torch.lib_dir,
        "KILN_TORCH_CXX11_ABI": "1" if torch.cxx11_abi else "0",
        # torch's own requirement, raised to the C++20 our kernels are written in.
        "KILN_TORCH_CXX_STANDARD": str(max(torch.cxx_standard, MIN_CXX_STANDARD)),
        "KILN_WITH_CUDA": "ON" if variant.cuda else "OFF",
        "KILN_VARIANT_TAG": variant.cuda_tag,
        "KILN_ABI_MODE": variant.mode,
        "KILN_WHEEL_VERSION": build_version(project, torch, variant, project.version),
        "KILN_STABLE_TORCH_MIN": stable_min_torch(project),
    }


def _cmake_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("json", "cmake"), default="json")
    parser.add_argument("--project-dir", type=Path, default=None,
                        help="the project's folder (its pyproject.toml [tool.kiln]; default: $KILN_PROJECT_DIR or .)")
    args = parser.parse_args(argv)
    try:
        project = load_project(args.project_dir or project_dir())
        torch = find_torch()
        variant = resolve_variant(torch, project=project)
        values = config_values(torch, variant, project)
    except (TorchNotFound, VariantError, ProjectError, MatrixError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "cmake":
        sys.stdout.write("".join(f"set({k} {_cmake_quote(v)})\n" for k, v in values.items()))
    else:
        print(json.dumps({"torch": asdict(torch), "variant": asdict(variant), "cmake": values}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
