"""kiln torch-abi: record the exported symbols of a torch wheel's libraries as data/torch_abi/<version>.json.

    kiln torch-abi TORCH_WHEEL [--extra WHEEL ...]    record one torch wheel (read, never installed)
    kiln torch-abi --runtime SITE_PACKAGES           record the libraries of the CUDA runtime wheels (nvidia-*,
                                                     cuda-toolkit) that torch's METADATA requires, as installed
                                                     with it there: data/torch_abi/runtime/<version>.json
    kiln torch-abi --for-wheels dist/*.whl           record the torch of each built wheel that is neither
                                                     recorded nor installed, downloading it (pip download
                                                     --no-deps) from the matrix's torch_index
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HELP = "record a torch wheel's library exports (for auditing against a torch that is not installed)"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheels", type=Path, nargs="*", metavar="WHEEL",
                        help="a torch wheel (pip download --no-deps torch==X); with --for-wheels: built wheels")
    parser.add_argument("--extra", type=Path, action="append", default=[], metavar="WHEEL",
                        help="another wheel whose libraries torch loads (e.g. the CUDA runtime); "
                        "repeatable")
    parser.add_argument("--runtime", type=Path, default=None, metavar="SITE_PACKAGES",
                        help="record torch's CUDA runtime wheels as installed in this site-packages")
    parser.add_argument("--for-wheels", action="store_true",
                        help="record the torch each built wheel's build info names, where missing")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="default: data/torch_abi ($KILN_TORCH_ABI_DIR)")


def _record(wheel: Path, extra: tuple[Path, ...], out: Path) -> None:
    from kiln_tool.audit.torch_abi import record_wheel, write_record

    record = record_wheel(wheel, extra)
    target = write_record(record, out)
    counts = ", ".join(f"{Path(m).name} {e['count']}" for m, e in record["libraries"].items())
    print(f"wrote {target} ({target.stat().st_size} bytes): torch {record['torch_version']}; {counts}")


def _needed_torches(wheels: list[Path]) -> list[str]:
    from kiln_tool.audit import inputs
    from kiln_tool.audit.policy import DEFAULT_POLICY, load_policy
    from kiln_tool.audit.target import candidate_lib_dirs, torch_version_at
    from kiln_tool.audit.torch_abi import recorded_versions

    have = set(recorded_versions()) | {torch_version_at(lib) for lib in candidate_lib_dirs()}
    needed: list[str] = []
    for path in wheels:
        whl = inputs.open_wheel(path, load_policy(DEFAULT_POLICY).limits)
        try:
            info = whl.build_info() or {}
        finally:
            whl.close()
        version = str(info.get("torch_version") or "")
        if version and version not in have and version not in needed:
            needed.append(version)
    return needed


def _download(version: str, into: Path) -> Path:
    from kiln_tool import matrix_data

    variant = version.partition("+")[2] or "cpu"
    index = matrix_data.load().index_url(variant)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--index-url", index, f"torch==={version}", "-d", str(into)],
                   check=True)
    (wheel,) = sorted(into.glob("torch-*.whl"))
    return wheel


def execute(args: argparse.Namespace) -> int:
    import zipfile

    from kiln_tool.audit.errors import AuditInputError
    from kiln_tool.audit.torch_abi import TorchAbiError, data_dir

    out = args.out or data_dir()
    if bool(args.runtime) == bool(args.wheels):
        print("kiln torch-abi: pass torch wheels, or --runtime SITE_PACKAGES (not both)", file=sys.stderr)
        return 2
    try:
        if args.runtime is not None:
            from kiln_tool.audit.torch_abi import record_runtime, write_record

            record = record_runtime(args.runtime)
            if f"{record['torch_version']}.json" not in {p.name for p in out.glob("*.json")}:
                raise TorchAbiError(f"torch {record['torch_version']} is not recorded in {out}: record its wheel first")
            target = write_record(record, out)
            print(f"wrote {target} ({target.stat().st_size} bytes): {len(record['libraries'])} libraries of "
                  f"{', '.join(record['runtime_wheels'])}")
            return 0
        if not args.for_wheels:
            for wheel in args.wheels:
                _record(wheel, tuple(args.extra), out)
            return 0
        for version in _needed_torches(list(args.wheels)):
            with tempfile.TemporaryDirectory(prefix="kiln-torch-abi-") as tmp:
                _record(_download(version, Path(tmp)), tuple(args.extra), out)
        return 0
    except (TorchAbiError, AuditInputError, OSError, zipfile.BadZipFile, ValueError) as exc:
        print(f"kiln torch-abi: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"kiln torch-abi: downloading torch failed ({exc})", file=sys.stderr)
        return 2
