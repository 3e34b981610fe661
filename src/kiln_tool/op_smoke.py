"""Call every public op of an installed opkiln once: each op's INSTALL_SAMPLES from its tests/ops file.

Used wherever a wheel is installed as a user would install it (tests/wheels, `kiln release-rehearsal`
in a fresh container). The samples are read as literals, never imported: an op's test file is the one
place adding an op touches (docs/adding-an-op.md). Standard library only.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

from .project import project_dir

OPS_TESTS = project_dir() / "tests" / "ops"

# Runs in the interpreter that has the wheel installed: every public op in opkiln.ops.__all__ must have a
# sample and must run; a new op without one fails. argv[1]: the samples as JSON.
EXERCISE_ALL_OPS = textwrap.dedent("""
    import json, sys, torch, opkiln
    samples = json.loads(sys.argv[1])
    results = {}
    for name in opkiln.ops.__all__:
        if name not in samples:
            sys.exit(f"no sample for op {name}: add it to INSTALL_SAMPLES in its tests/ops/test_<op>.py")
        results[name] = eval(samples[name], {"torch": torch, "opkiln": opkiln}).tolist()
    print(json.dumps({"version": opkiln.__version__, "torch": torch.__version__, "results": results,
                      "ops": opkiln.build_info()["ops"]}))
""")


def install_samples(folder: Path = OPS_TESTS) -> dict[str, str]:
    """Each op's INSTALL_SAMPLES (op name -> a Python expression), from the test files in `folder`."""
    samples: dict[str, str] = {}
    for test_file in sorted(folder.glob("test_*.py")):
        for node in ast.parse(test_file.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "INSTALL_SAMPLES"):
                found = ast.literal_eval(node.value)
                if set(found) & set(samples):
                    raise ValueError(f"{test_file.name}: an op with two install samples")
                samples.update(found)
    return samples


def samples_json() -> str:
    return json.dumps(install_samples())
