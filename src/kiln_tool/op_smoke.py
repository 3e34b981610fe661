"""Check an installed kiln-built package as its users meet it: import it, find every op of its build
manifest registered, and call the project's install samples.

Used wherever a wheel is installed as a user would install it (tests/wheels, `kiln release-rehearsal`
in a fresh container). The samples come from ``[tool.kiln] install-samples``: a test file, or a folder
of ``test_*.py`` files, each with an ``INSTALL_SAMPLES`` dict literal (public op name -> a Python
expression over ``torch`` and the package). They are read as literals, never imported. Every op of the
manifest whose name has no leading ``_`` must have a sample, so an op added without one fails here.
Standard library only.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

from .project import KilnProject

MAX_SAMPLE_FILE_BYTES = 1 << 20

# Runs in the interpreter that has the wheel installed. argv: the package, the samples as JSON ("null": the
# project has none). Prints one JSON line: version, torch, each sample's result (as a list), the manifest.
EXERCISE = textwrap.dedent("""
    import importlib, json, sys
    import torch
    package, samples = sys.argv[1], json.loads(sys.argv[2])
    module = importlib.import_module(package)
    from importlib import resources
    info = json.loads(resources.files(package).joinpath("_build_info.json").read_text())
    manifest = list(info.get("ops", []))

    def registered(op):
        if torch._C._dispatch_has_kernel(op):
            return True
        try:
            torch._C._dispatch_find_schema_or_throw(op, "")
        except RuntimeError:
            return False
        return True

    missing = [op for op in manifest if not registered(op)]
    if missing:
        sys.exit(f"import {package} left these ops of its build manifest unregistered: {', '.join(missing)}")

    def plain(value):
        if isinstance(value, torch.Tensor):
            return value.tolist()
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value

    results = {}
    if samples is not None:
        public = sorted({op.partition("::")[2] for op in manifest} - {""})
        unsampled = [name for name in public if not name.startswith("_") and name not in samples]
        if unsampled:
            sys.exit(f"no install sample for op(s) {', '.join(unsampled)}: add each to an INSTALL_SAMPLES "
                     "dict of the project's install-samples ([tool.kiln])")
        for name, expression in sorted(samples.items()):
            results[name] = plain(eval(expression, {"torch": torch, package: module}))
    version = getattr(module, "__version__", None) or info.get("version")
    print(json.dumps({"package": package, "version": version, "torch": torch.__version__,
                      "results": results, "ops": manifest}))
""")


class SamplesError(ValueError):
    """The project's install samples cannot be read (exit 2)."""

    exit_code = 2


def _sample_files(where: Path) -> list[Path]:
    if where.is_dir():
        return sorted(where.glob("test_*.py"))
    return [where]


def install_samples(where: Path) -> dict[str, str]:
    """Each INSTALL_SAMPLES entry (op name -> a Python expression) of the test file or folder `where`."""
    samples: dict[str, str] = {}
    for test_file in _sample_files(where):
        try:
            with test_file.open("rb") as fh:
                raw = fh.read(MAX_SAMPLE_FILE_BYTES + 1)
            if len(raw) > MAX_SAMPLE_FILE_BYTES:
                raise SamplesError(f"{test_file}: larger than {MAX_SAMPLE_FILE_BYTES} bytes")
            tree = ast.parse(raw, filename=str(test_file))
        except (OSError, SyntaxError, ValueError) as exc:
            if isinstance(exc, SamplesError):
                raise
            raise SamplesError(f"{test_file}: cannot read its install samples ({exc})") from None
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "INSTALL_SAMPLES"):
                try:
                    found = ast.literal_eval(node.value)
                except ValueError:
                    found = None
                if not isinstance(found, dict) or not all(
                        isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
                    raise SamplesError(f"{test_file}:{node.lineno}: INSTALL_SAMPLES is not a literal dict of "
                                       "op name -> expression strings")
                twice = sorted(set(found) & set(samples))
                if twice:
                    raise SamplesError(f"{test_file}: a second install sample for {', '.join(twice)}")
                samples.update(found)
    return samples


def project_samples(project: KilnProject) -> dict[str, str] | None:
    """The project's install samples, or None when its [tool.kiln] names none."""
    if project.install_samples is None:
        return None
    if not project.install_samples.exists():
        raise SamplesError(f"tool.kiln.install-samples: {project.install_samples} does not exist")
    return install_samples(project.install_samples)


def exercise_args(project: KilnProject) -> list[str]:
    """`python -c EXERCISE <these>`: the package and its samples."""
    return [project.package, json.dumps(project_samples(project))]
