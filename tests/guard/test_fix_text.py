"""Issue 43, class 1: every fix the guard and the doctor print is one command that ``shlex.split`` gives back as
exactly the intended arguments, built from values checked where they entered; a file is named for deletion only
when an installed distribution's RECORD lists that very file and the distribution is the package's.

The guard runs from a package made in a temporary site folder (guard_pkg.py); the pasted commands are run by a
real bash with ``pip``/``rm`` replaced by functions that print their arguments."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.guard_pkg import GuardedPackage, environment_info, make_package

HOSTILE = ["https://x.example/$(touch {canary})", "https://x.example/`touch {canary}`",
           "https://x.example/a;touch {canary}", "https://x.example/a|touch {canary}",
           "https://x.example/a\ntouch {canary}", "https://x.example/a' ; touch {canary}; '",
           "https://x.example/a&&touch {canary}", "https://x.example/\x1b[2Jfake", "https://x.example/a\u202eb",
           "-fhttps://x.example", "javascript:alert(1)", "https://x.example/a b", "https://x.example/${{HOME}}"]


@pytest.fixture(scope="module")
def pkg(tmp_path_factory: pytest.TempPathFactory) -> GuardedPackage:
    return make_package(tmp_path_factory.mktemp("site"), environment_info())


def _env(pkg: GuardedPackage, **overrides: object):
    preflight = pkg.module("preflight")
    fields = {"torch_version": "2.13.0+cpu", "cuda": None, "cxx11_abi": True, "python_version": (3, 11),
              "python_tag": "cp311", "extension_suffixes": (".cpython-311-x86_64-linux-gnu.so",)}
    fields.update(overrides)
    return preflight.Environment(**fields)


def _pasted(command: str, tmp: Path) -> list[str]:
    """What bash runs when ``command`` is pasted: the arguments pip/rm/unset/env would get (printed, not run)."""
    script = ("pip() { printf '%s\\0' pip \"$@\"; }; rm() { printf '%s\\0' rm \"$@\"; }; "
              "unset() { printf '%s\\0' unset \"$@\"; }; env() { printf '%s\\0' env \"$@\"; }\n" + command + "\n")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, cwd=tmp, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("value", HOSTILE)
def test_an_index_url_override_pasted_runs_nothing_else(pkg: GuardedPackage, tmp_path: Path, value: str) -> None:
    """<PREFIX>_INDEX_URL reaches the printed fix; pasted, the fix must install from that page or, when the value
    cannot be shown, unset the variable, and never run what the value holds."""
    preflight = pkg.module("preflight")
    canary = tmp_path / "canary"
    value = value.format(canary=canary)
    reason, command = preflight.install_fix(pkg.module("buildinfo").build_info(), _env(pkg),
                                            {preflight.INDEX_URL_ENV: value})
    args = _pasted(command, tmp_path)
    assert not canary.exists(), command
    assert args == shlex.split(command)
    if args[0] == "unset":
        assert args == ["unset", preflight.INDEX_URL_ENV] and preflight.INDEX_URL_ENV in reason
        assert reason.isprintable()  # the value shown escaped, never raw
    else:
        assert args == ["pip", "install", "--force-reinstall", "--no-deps", pkg.dist, "-f",
                        value.rstrip("/") + "/cpu/torch2.13/index.html"]
        assert value.isprintable() and " " not in value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=60), st.builds(lambda s: "https://h.example/" + s, st.text(max_size=40))))
def test_any_index_url_gives_one_command(pkg: GuardedPackage, value: str) -> None:
    preflight = pkg.module("preflight")
    info = pkg.module("buildinfo").build_info()
    reason, command = preflight.install_fix(info, _env(pkg, cuda="13.0", torch_version="2.14.1+cu130"),
                                            {preflight.INDEX_URL_ENV: value})
    args = shlex.split(command)
    if args[0] == "unset":
        assert args == ["unset", preflight.INDEX_URL_ENV]
        assert reason.isprintable()
    else:
        base = value.strip().rstrip("/") or info["index_url"]
        assert args == ["pip", "install", "--force-reinstall", "--no-deps", pkg.dist, "-f",
                        f"{base}/cu130/torch2.14/index.html"]
        assert all(a.isprintable() for a in args)


def test_without_an_index_url_the_variable_expands(pkg: GuardedPackage, tmp_path: Path) -> None:
    """No base URL anywhere: the printed fix names the variable, which the shell expands when pasted."""
    preflight = pkg.module("preflight")
    info = {**pkg.module("buildinfo").build_info(), "index_url": None}
    _, command = preflight.install_fix(info, _env(pkg), {})
    variable = preflight.INDEX_URL_ENV
    script_env = f"export {variable}=https://mirror.example.org/w; "
    args = _pasted(script_env + command, tmp_path)
    assert args[-1] == "https://mirror.example.org/w/cpu/torch2.13/index.html"
    assert shlex.split(command)[-1] == "${" + variable + "}/cpu/torch2.13/index.html"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=30), min_size=1, max_size=6))
def test_command_round_trips_or_refuses(args: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from kiln_tool.guard import shell

    if all(a.isprintable() for a in args):
        assert shlex.split(shell.command(*args)) == args
    else:
        with pytest.raises(shell.UnsafeValue, match="control or invisible character"):
            shell.command(*args)


def test_env_assignment_stays_an_assignment(tmp_path: Path) -> None:
    from kiln_tool.guard import shell

    command = shell.with_env({"KILN_CUDA_ARCHS": "9.0 8.0"}, "kiln", "wheels")
    assert shlex.split(command) == ["env", "KILN_CUDA_ARCHS=9.0 8.0", "kiln", "wheels"]
    assert _pasted(command, tmp_path) == ["env", "KILN_CUDA_ARCHS=9.0 8.0", "kiln", "wheels"]


# -- a second copy already loaded: only a proven copy is named, by identity ------------------------------------------

SCENARIO = r"""
import json, sys, torch
sys.path.insert(0, {site!r})
{setup}
from {name}._kiln import loader
try:
    loader.load_libraries()
except ImportError as exc:
    print(json.dumps({{"fix": exc.fix, "problems": exc.problems}}))
"""


def _run_scenario(pkg: GuardedPackage, setup: str) -> dict[str, object]:
    code = SCENARIO.format(site=str(pkg.site), name=pkg.name, setup=setup)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _libz() -> Path:
    import ctypes.util

    found = ctypes.util.find_library("z")
    for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib"):
        if found and (Path(folder) / found).is_file():
            return Path(folder) / found
    pytest.skip("no libz to stand in for a second copy's library")


@pytest.mark.slow  # three subprocesses that import torch: about 8 s
def test_torchs_own_C_is_never_named(tmp_path: Path) -> None:
    """The layout of the report: a package whose name is part of torch's path ('packages' in site-packages) and
    whose library is called _C, with its op already registered. torch._C is loaded; it is not a copy."""
    pkg = make_package(tmp_path / "site", environment_info(ops=["aten::add.Tensor"], targets=["packages/_C"]),
                       name="packages")
    result = _run_scenario(pkg, "")
    import torch

    torch_c = str(Path(torch._C.__file__))
    assert torch_c not in str(result), result
    args = shlex.split(str(result["fix"]))
    assert args[0] != "rm" and args[:3] == ["python", "-m", "packages._kiln"], result


@pytest.mark.slow
def test_a_proven_copy_is_named_and_an_unproven_one_is_not(tmp_path: Path) -> None:
    """Two libraries named like ours are loaded: one listed in the RECORD of our distribution installed in another
    site folder (the fix removes exactly it), one stray (named in the message, never in the fix)."""
    pkg = make_package(tmp_path / "site", environment_info(ops=["aten::add.Tensor"], targets=["ringo/_C=load-library"]),
                       name="ringo", dist="ringo")
    other = make_package(tmp_path / "other site", environment_info(), name="ringo", dist="ringo")
    owned = other.folder / "_C.so"
    shutil.copy2(_libz(), owned)
    other.add_to_record(owned)
    stray = tmp_path / "stray $(x)" / "_C.so"
    stray.parent.mkdir()
    shutil.copy2(_libz(), stray)
    setup = f"torch.ops.load_library({str(owned)!r}); torch.ops.load_library({str(stray)!r})"
    result = _run_scenario(pkg, setup)
    assert shlex.split(str(result["fix"])) == ["rm", "-f", "--", str(owned)]
    assert str(stray) in str(result["problems"])


# -- the doctor's other copies -------------------------------------------------------------------------------------

def test_doctor_names_only_record_files_of_the_distribution(tmp_path: Path) -> None:
    pkg = make_package(tmp_path / "site", environment_info())
    doctor = pkg.module("doctor")
    # Our distribution installed a second time elsewhere: its RECORD files are named, and only those.
    again = make_package(tmp_path / "again", environment_info(), name=pkg.name, dist=pkg.dist)
    extra = again.folder / "user-data.txt"
    extra.write_text("not installed by pip")
    # A stray library and a library another distribution owns, both named like ours and holding our name.
    stray = tmp_path / "stray" / "_C.so"
    stray.parent.mkdir()
    stray.write_bytes(pkg.name.encode())
    foreign = make_package(tmp_path / "foreign", environment_info(), dist="torchish")
    owned_by_other = foreign.site / "_C.so"
    owned_by_other.write_bytes(pkg.name.encode())
    foreign.add_to_record(owned_by_other)
    copies = doctor.other_copies(pkg.folder, [pkg.site, again.site, stray.parent, foreign.site], ["_C"], pkg.dist)
    kinds = {(Path(c["path"]), c["kind"]) for c in copies}
    assert (again.folder, "package") in kinds and (stray, "library") in kinds and (owned_by_other, "library") in kinds
    removable, unproven = doctor.removal_plan(copies, pkg.dist)
    again_files = {str(p) for p in again.folder.rglob("*") if p.is_file() and p != extra}
    dist_info_files = {str(p) for p in next(again.site.glob("*.dist-info")).iterdir()}
    assert set(removable) == again_files | dist_info_files
    assert str(extra) not in removable and str(stray) in unproven and str(owned_by_other) in unproven
