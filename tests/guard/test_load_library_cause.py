"""A load-library package whose preflight is skipped: the guard's message names the undefined symbol that
torch.ops.load_library keeps only in its OSError's cause (issue 42, item 6; docs/import-guard.md).

The library is real: a C shared object, built here with gcc, that needs a data symbol nothing provides (a data
reference fails at dlopen, as a torch symbol missing from another torch minor does)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from guard.guard_pkg import environment_info, make_package

SOURCE = "extern int kiln_symbol_no_torch_exports;\nint kiln_read(void) { return kiln_symbol_no_torch_exports; }\n"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_undefined_symbol_is_in_the_guards_message(tmp_path: Path) -> None:
    site = tmp_path / "site"
    pkg = make_package(site, environment_info(libraries="load-library"), name="symcause")
    pkg.write_info(environment_info(libraries="load-library", targets=["symcause/_ops=load-library"],
                                    ops=["symcause::nothing"]))
    (tmp_path / "ops.c").write_text(SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "ops.c"), "-o", str(pkg.folder / "_ops.so")],
                   check=True)
    (pkg.folder / "__init__.py").write_text("from ._kiln import guard\n\nguard.load(__name__)\n")
    proc = subprocess.run([sys.executable, "-c", "import symcause"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "SYMCAUSE_SKIP_PREFLIGHT": "1", "PATH": "/usr/bin:/bin"},
                          check=False)
    assert proc.returncode == 1
    message = " ".join(proc.stderr.split("SymcauseEnvironmentError:", 1)[-1].split())
    assert "undefined symbol: kiln_symbol_no_torch_exports" in message, proc.stderr
    assert "the files may be damaged" not in message, proc.stderr
