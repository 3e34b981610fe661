"""What CMake needs to know before project(): the torch to build against and the variant.

``python -m kiln_tool.build_config --format cmake`` prints ``set()`` commands;
``--format json`` prints the same facts for people and tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from .build_metadata import STABLE_ABI_MIN_TORCH
from .torch_probe import TorchInstall, TorchNotFound, find_torch
from .variant import BuildVariant, VariantError, resolve_variant, wheel_version

MIN_CXX_STANDARD = 20


def config_values(torch: TorchInstall, variant: BuildVariant) -> dict[str, str]:
    return {
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
        "OPKILN_WITH_CUDA": "ON" if variant.cuda else "OFF",
        "KILN_VARIANT_TAG": variant.cuda_tag,
        "KILN_ABI_MODE": variant.mode,
        "KILN_WHEEL_VERSION": wheel_version(torch, variant),
        "KILN_STABLE_TORCH_MIN": STABLE_ABI_MIN_TORCH,
    }


def _cmake_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("json", "cmake"), default="json")
    args = parser.parse_args(argv)
    try:
        torch = find_torch()
        variant = resolve_variant(torch)
    except (TorchNotFound, VariantError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    values = config_values(torch, variant)
    if args.format == "cmake":
        sys.stdout.write("".join(f"set({k} {_cmake_quote(v)})\n" for k, v in values.items()))
    else:
        print(json.dumps({"torch": asdict(torch), "variant": asdict(variant), "cmake": values}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
