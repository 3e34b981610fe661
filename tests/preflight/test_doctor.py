"""`python -m opkiln doctor [--json]` in real venvs: a good install, broken ones, and a mismatched one."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from preflight.preflight_support import assert_clean_failure, install_command

pytestmark = pytest.mark.slow

CHECK_NAMES = {"python", "platform", "torch", "cudnn", "C++11 ABI (torch)", "GPUs", "NVIDIA driver", "opkiln build",
               "preflight", "load opkiln._C", "registered ops", "other copies", "LD_LIBRARY_PATH/LD_PRELOAD",
               "sitecustomize/usercustomize"}


def doctor_json(venv, env=None):
    proc = venv.run("-m", "opkiln", "doctor", "--json", env=env)
    assert proc.returncode in (0, 1), f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


def checks_by_name(report):
    return {c["name"]: c for c in report["checks"]}


def test_good_install_json(good_venv):
    rc, report = doctor_json(good_venv)
    assert rc == 0 and report["verdict"] == "ok", report["summary"]
    assert report["fix"] is None and report["fixes"] == []
    assert set(checks_by_name(report)) >= CHECK_NAMES
    info = good_venv.build_info()
    assert report["build_info"] == info
    assert report["ops"]["registered"] == info["ops"] and report["ops"]["missing"] == []
    assert report["other_copies"] == []
    assert report["python"]["tag"] == "cp311"
    assert report["platform"]["glibc"]
    assert report["torch"]["version"] == "2.13.0+cpu" and report["torch"]["cuda"] is None
    assert report["torch"]["cxx11_abi"] is True and report["torch"]["gpus"] == []
    assert report["index_page"] == "https://opkiln.github.io/wheels/cpu/torch2.13/index.html"
    assert report["load_error"] is None


def test_good_install_table(good_venv):
    proc = good_venv.run("-m", "opkiln", "doctor")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["STATUS", "CHECK", "VALUE"]
    assert any(line.startswith("OK") and "registered ops" in line for line in lines)
    assert "Verdict: OK" in proc.stdout


@pytest.mark.parametrize("plant", ["library", "package"])
def test_second_copy_planted_on_sys_path(good_venv, tmp_path, plant):
    """A second opkiln/_C (or a whole opkiln package) on PYTHONPATH is a problem with an exact fix."""
    planted = tmp_path / "plant" / "opkiln"
    if plant == "package":
        shutil.copytree(good_venv.package, planted)
    else:
        planted.mkdir(parents=True)
        (lib,) = good_venv.package.glob("_C.*.so")
        shutil.copy2(lib, planted / lib.name)
    env = {"PYTHONPATH": str(tmp_path / "plant")}
    rc, report = doctor_json(good_venv, env)
    assert rc == 1 and report["verdict"] == "fail"
    copies = report["other_copies"]
    if plant == "package":  # the planted copy wins the import; the installed one is then the other copy
        assert report["package_path"] == str(planted)
        assert {c["path"] for c in copies} >= {str(good_venv.package)}
    else:
        (lib,) = planted.glob("_C.*.so")
        assert copies == [{"path": str(lib), "kind": "library", "detail": "a stray copy of opkiln's _C"}]
        # No installed distribution's RECORD lists the planted file: no fix deletes it (issue 43).
        assert report["fix"] is None
        assert any("no installed distribution's RECORD lists it" in d
                   for d in checks_by_name(report)["other copies"]["detail"])
    assert checks_by_name(report)["other copies"]["status"] == "fail"
    table = good_venv.run("-m", "opkiln", "doctor", env=env)
    assert table.returncode == 1 and "Verdict: FAIL" in table.stdout and "rm -rf" not in table.stdout
    if plant == "package":  # the installed copy is what pip installed: its RECORD files are named
        assert "Fix:     rm -f -- " in table.stdout and str(good_venv.package / "__init__.py") in table.stdout


def test_mismatched_install(make_venv, torch213_site, cuda_wheel):
    venv = make_venv("cuda214-wheel-on-torch2.13-cpu", torch213_site, cuda_wheel)
    rc, report = doctor_json(venv)
    assert rc == 1 and report["verdict"] == "fail"
    assert report["fix"] == install_command("cpu", "2.13")
    checks = checks_by_name(report)
    assert checks["preflight"]["status"] == "fail" and len(report["preflight"]["problems"]) == 2
    assert checks["load opkiln._C"]["value"].startswith("not attempted")
    assert "opkiln._C" not in str(report["load_error"])
    # The fatbin manifest read from the real library agrees with the build info's arch list.
    info = venv.build_info()
    fatbin = report["fatbin"]
    assert fatbin["source"] == "fatbin"
    assert fatbin["sass"] == [a.split("+")[0].replace(".", "") for a in info["cuda_archs"]]
    assert fatbin["ptx"] == [a.split("+")[0].replace(".", "") for a in info["cuda_archs"] if a.endswith("+PTX")]
    assert checks["GPU arch coverage"]["status"] == "ok"
    table = venv.run("-m", "opkiln", "doctor")
    assert table.returncode == 1 and f"Fix:     {install_command('cpu', '2.13')}" in table.stdout
    assert_clean_failure(venv.run("-c", "import opkiln"))


def test_skipped_preflight_shows_raw_loader_error_in_doctor_only(make_venv, torch213_site, cuda_wheel):
    venv = make_venv("cuda214-wheel-on-torch2.13-cpu", torch213_site, cuda_wheel)
    rc, report = doctor_json(venv, {"OPKILN_SKIP_PREFLIGHT": "1"})
    assert rc == 1
    assert report["preflight"]["skipped_by_env"] is True
    assert "libc10_cuda.so: cannot open shared object file" in report["load_error"]
    assert checks_by_name(report)["load opkiln._C"]["status"] == "fail"


def test_library_path_preload_and_customize(good_venv, tmp_path):
    libdir = tmp_path / "libs"
    libdir.mkdir()
    (libdir / "libcudart.so.13").write_bytes(b"")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text("# planted by the test\n")
    env = {"LD_LIBRARY_PATH": str(libdir), "PYTHONPATH": str(hooks)}
    rc, report = doctor_json(good_venv, env)
    assert rc == 0 and report["verdict"] == "warn"
    shadows = report["library_path"]["shadows"]
    assert [(s["variable"], s["path"], s["severity"]) for s in shadows] == [("LD_LIBRARY_PATH", str(libdir), "warn")]
    assert report["customize"] == [{"module": "sitecustomize", "path": str(hooks / "sitecustomize.py"),
                                     "origin": "local"}]
    # A torch library named in LD_PRELOAD is a problem (the loader ignores a missing one, so this cannot crash).
    rc, report = doctor_json(good_venv, {"LD_PRELOAD": str(tmp_path / "libc10.so")})
    assert rc == 1 and report["verdict"] == "fail"
    assert report["fix"].startswith("unset LD_PRELOAD")


COVERAGE_CASES = [
    ("9.0", {"sass": ["80", "90"], "ptx": []}, "SASS sm_90"),
    ("8.9", {"sass": ["80", "86"], "ptx": []}, "SASS sm_86"),
    ("9.0", {"sass": ["80"], "ptx": []}, None),
    ("9.0", {"sass": ["80"], "ptx": ["80"]}, "PTX compute_80 (JIT-compiled on first use)"),
    ("12.1", {"sass": ["90", "100"], "ptx": ["120"]}, "PTX compute_120 (JIT-compiled on first use)"),
    ("9.0", {"sass": ["90a"], "ptx": []}, "SASS sm_90a"),
    ("10.0", {"sass": ["90a"], "ptx": ["90a"]}, None),
    ("7.0", {"sass": ["75"], "ptx": ["75"]}, None),
]


def test_arch_coverage_rules(good_venv):
    script = ("import json, sys; from opkiln._kiln.doctor import coverage; "
              "print(json.dumps([coverage(c, m) for c, m, _ in json.loads(sys.argv[1])]))")
    proc = good_venv.run("-c", script, json.dumps(COVERAGE_CASES))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [expected for _, _, expected in COVERAGE_CASES]


def test_doctor_without_torch(make_venv, cpu_wheel, tmp_path_factory):
    """No torch at all: `import opkiln` fails on torch, doctor still reports and names the torch to install."""
    venv = make_venv("cpu213-wheel-without-torch", tmp_path_factory.mktemp("no-torch"), cpu_wheel)
    rc, report = doctor_json(venv)
    assert rc == 1 and report["verdict"] == "fail"
    assert report["torch"]["importable"] is False
    assert shlex.split(report["fix"]) == ["pip", "install", "torch==2.13.*", "--index-url",
                                          "https://download.pytorch.org/whl/cpu"]
