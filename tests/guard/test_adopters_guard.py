"""kiln's import guard in packages that are not opkiln: the adopters' fixture projects, built by the installed tool
(ringops with kiln's CMake API, twinlibs with setup.py and relabelled by kiln), each use it in two lines of their
__init__.py. Installed beside the torch they were built for, they import and run, and their doctor says OK;
beside another torch, the import fails with that project's own error, naming the exact page `kiln index` writes
for the installed torch and the pip command; a missing op or library is named, never a raw loader error."""

from __future__ import annotations

import json
import shutil
import socket
import zipfile
from pathlib import Path

import pytest

from adopters.adopting import Built, KilnTool, record_problems
from kiln_tool.build_info import guard_files
from kiln_tool.index.combos import Combination
from preflight.preflight_support import Venv

pytestmark = pytest.mark.slow

RINGOPS_INDEX = "https://wheels.ringops.example"  # its [tool.kiln] index-url
RUN_RINGOPS = ("import torch, ringops; x = torch.arange(5.0)\n"
               "assert torch.equal(ringops.ring_shift(x, 2), torch.roll(x, 2, -1)); print('RESULT ok')")
RUN_TWINLIBS = ("import torch, twinlibs; x = torch.arange(5.0)\n"
                "assert torch.equal(twinlibs.prefix_sum(x), torch.cumsum(x, -1)); print('RESULT ok')")
RAW = ("undefined symbol", "cannot open shared object file", "_ZN3c10", "Traceback (most recent call last):\n  File "
       "\"<string>\", line 1, in <module>\nOSError")


def page(index: str, torch: str, cuda: str) -> str:
    """The find-links page kiln index / kiln release write for (torch, cuda) under `index`."""
    return f"{index}/{Combination(torch=torch, cuda=cuda).page}"


def clean_failure(proc, error_class: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0,) and proc.returncode > 0, out
    for raw in RAW:
        assert raw not in out, f"raw loader error leaked ({raw!r}):\n{out}"
    assert f"{error_class}: " in out, out
    return " ".join(out.split())


def doctor(venv: Venv, package: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    proc = venv.run("-m", f"{package}._kiln", "doctor", "--json", env=env)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def shadow_copy(venv: Venv, package: str, tmp_path: Path) -> Path:
    """The venv's installed package copied under tmp_path/shadow (for PYTHONPATH); returns the copy."""
    copy = tmp_path / "shadow" / package
    shutil.copytree(venv.site / package, copy)
    return copy


@pytest.mark.parametrize("project", ["ringops", "twinlibs"])
def test_the_wheel_carries_the_guard_verbatim(project: str, request: pytest.FixtureRequest,
                                             kiln_tool: KilnTool) -> None:
    built: Built = request.getfixturevalue(f"{project}_cpu")
    wheel = built.wheel("pt213cpu")
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n.split("/")[-1]: zf.read(n) for n in zf.namelist()
                   if n.startswith(f"{project}/_kiln/") and not n.endswith("/")}
        info = json.loads(zf.read(f"{project}/_build_info.json"))
    # The guard of the installed kiln that built it (this checkout's tree when its wheel was made).
    (template,) = kiln_tool.venv.glob("lib/python3*/site-packages/kiln_tool/guard")
    carried = {p.name: p.read_bytes() for p in template.glob("*.py")}
    assert shipped == carried, "every .py of kiln_tool/guard, byte for byte, and nothing else"
    assert set(carried) == set(guard_files())
    assert record_problems(wheel) == []
    expected = {"ringops": ["ringops/_C=python-module"],
                "twinlibs": ["twinlibs/_axpy=load-library", "twinlibs/_prefix_sum=load-library"]}[project]
    assert info["targets"] == expected


def test_ringops_imports_runs_and_its_doctor_is_ok(wheel_venv, torch213_site: Path, ringops_cpu: Built) -> None:
    venv = wheel_venv("ringops-on-torch2.13", torch213_site, ringops_cpu.wheel("pt213cpu"))
    proc = venv.run("-c", RUN_RINGOPS)
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, proc.stdout + proc.stderr
    rc, report = doctor(venv, "ringops")
    assert rc == 0 and report["verdict"] == "ok", report["summary"]
    assert report["package"] == "ringops" and report["ops"]["registered"] == ["ringops::ring_shift"]
    assert report["index_page"] == page(RINGOPS_INDEX, "2.13", "cpu")
    assert report["env"]["skip_preflight"] == "RINGOPS_SKIP_PREFLIGHT"


def test_ringops_on_another_torch_names_its_page(wheel_venv, torch214_site: Path, ringops_cpu: Built) -> None:
    venv = wheel_venv("ringops-on-torch2.14-cu130", torch214_site, ringops_cpu.wheel("pt213cpu"))
    out = clean_failure(venv.run("-c", "import ringops"), "RingopsEnvironmentError")
    command = f"pip install --force-reinstall --no-deps ringops -f {page(RINGOPS_INDEX, '2.14', 'cu130')}"
    assert command in out
    assert "ringops cannot be imported: this ringops wheel was built for a different environment" in out
    assert "the wheel was compiled against torch 2.13" in out
    assert "python -m ringops._kiln doctor" in out and "RINGOPS_SKIP_PREFLIGHT=1" in out
    # A mirror: RINGOPS_INDEX_URL replaces the build info's index URL.
    mirrored = clean_failure(venv.run("-c", "import ringops", env={"RINGOPS_INDEX_URL": "https://m.example/r/"}),
                             "RingopsEnvironmentError")
    assert f"pip install --force-reinstall --no-deps ringops -f {page('https://m.example/r', '2.14', 'cu130')}" \
        in mirrored
    # The doctor runs although the import fails, and gives the same fix.
    rc, report = doctor(venv, "ringops")
    assert rc == 1 and report["verdict"] == "fail" and report["fix"] == command
    assert report["checks"][[c["name"] for c in report["checks"]].index("load ringops._C")]["value"].startswith(
        "not attempted")


def test_ringops_missing_op_is_named(wheel_venv, torch213_site: Path, ringops_cpu: Built, tmp_path: Path) -> None:
    venv = wheel_venv("ringops-on-torch2.13", torch213_site, ringops_cpu.wheel("pt213cpu"))
    copy = shadow_copy(venv, "ringops", tmp_path)
    info = json.loads((copy / "_build_info.json").read_text())
    info["ops"] = [*info["ops"], "ringops::never_built"]
    (copy / "_build_info.json").write_text(json.dumps(info))
    env = {"PYTHONPATH": str(copy.parent)}
    out = clean_failure(venv.run("-c", "import ringops", env=env), "RingopsEnvironmentError")
    assert "these operators are not registered: ringops::never_built" in out
    rc, report = doctor(venv, "ringops", env)
    assert rc == 1 and report["ops"]["missing"] == ["ringops::never_built"]
    assert report["package_path"] == str(copy)


def test_twinlibs_imports_runs_and_its_doctor_is_ok(wheel_venv, torch213_site: Path, twinlibs_cpu: Built) -> None:
    venv = wheel_venv("twinlibs-on-torch2.13", torch213_site, twinlibs_cpu.wheel("pt213cpu"))
    proc = venv.run("-c", RUN_TWINLIBS)
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, proc.stdout + proc.stderr
    rc, report = doctor(venv, "twinlibs")
    assert rc == 0 and report["verdict"] == "ok", report["summary"]
    assert report["ops"]["registered"] == ["twinlibs::axpy", "twinlibs::prefix_sum"]


def test_twinlibs_on_another_torch_names_the_page(wheel_venv, torch214_site: Path, twinlibs_cpu: Built) -> None:
    """twinlibs names no index URL: the command names the page under $TWINLIBS_INDEX_URL, or under its value."""
    venv = wheel_venv("twinlibs-on-torch2.14-cu130", torch214_site, twinlibs_cpu.wheel("pt213cpu"))
    out = clean_failure(venv.run("-c", "import twinlibs"), "TwinlibsEnvironmentError")
    # No URL known: the variable, quoted so that the pasted command expands it into one word.
    variable = '"${TWINLIBS_INDEX_URL}"'
    assert f"pip install --force-reinstall --no-deps twinlibs -f {page(variable, '2.14', 'cu130')}" in out
    assert "this build names no index URL: set TWINLIBS_INDEX_URL" in out
    site = "http://127.0.0.1:8123/twinlibs"
    out = clean_failure(venv.run("-c", "import twinlibs", env={"TWINLIBS_INDEX_URL": site}),
                        "TwinlibsEnvironmentError")
    assert f"pip install --force-reinstall --no-deps twinlibs -f {page(site, '2.14', 'cu130')}" in out


def test_twinlibs_missing_library_is_named(wheel_venv, torch213_site: Path, twinlibs_cpu: Built,
                                           tmp_path: Path) -> None:
    venv = wheel_venv("twinlibs-on-torch2.13", torch213_site, twinlibs_cpu.wheel("pt213cpu"))
    copy = shadow_copy(venv, "twinlibs", tmp_path)
    for library in copy.glob("_prefix_sum.*so"):
        library.unlink()
    env = {"PYTHONPATH": str(copy.parent)}
    out = clean_failure(venv.run("-c", "import twinlibs", env=env), "TwinlibsEnvironmentError")
    assert "its compiled library failed to load (twinlibs/_prefix_sum)" in out
    assert "compiled library (twinlibs/_prefix_sum.*.so) is missing" in out
    rc, report = doctor(venv, "twinlibs", env)
    assert rc == 1 and report["verdict"] == "fail"


def test_doctor_ranks_answers_also_where_the_import_fails(wheel_venv, torch213_site: Path, torch214_site: Path,
                                                           ringops_cpu: Built) -> None:
    """`python -m ringops._kiln doctor --ranks` (one process: rank 0 of 1) hands over to the distributed check
    (docs/distributed-check.md), also when importing ringops fails: exit 0 where it works, 1 where it does not."""
    for name, site, expected in (("ringops-on-torch2.13", torch213_site, 0),
                                 ("ringops-on-torch2.14-cu130", torch214_site, 1)):
        venv = wheel_venv(name, site, ringops_cpu.wheel("pt213cpu"))
        with socket.socket() as sock:  # a free port for the lone rank's store
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        proc = venv.run("-m", "ringops._kiln", "doctor", "--ranks", "--timeout", "60", env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == expected, out
        assert "ringops" in out and "Traceback" not in out
