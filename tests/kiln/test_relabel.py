"""kiln_tool.relabel: a wheel the project's own backend built (setuptools, here for real) becomes a kiln wheel.

The input is a real setuptools wheel of a tiny package whose distribution name (``Ring.Ops``) is not its
import package (``ringops``) and which ships a stand-in extension file; the variants the refusal tests need
are that wheel's own members, re-zipped with one fault each (and a fresh RECORD unless the RECORD is the
fault).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.metadata import Metadata
from packaging.requirements import Requirement

from kiln_tool import kiln_wheel
from kiln_tool.build_info import guard_files
from kiln_tool.relabel import RelabelError, relabel_wheel
from kiln_tool.safezip import SafeZip

PROJECT = "ring-ops"
PACKAGE = "ringops"
LABEL = "pt214cu130"
PIN = "torch>=2.14,<2.15"
EPOCH = "1700000000"
PYTHON_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
INPUT_DIST_INFO = "ring_ops-0.3.0.dist-info"
OUTPUT_DIST_INFO = "ring_ops-0.3.0+pt214cu130.dist-info"
NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")  # what kiln writes as one part of a member name
HYPOTHESIS = settings(max_examples=25, deadline=None, derandomize=True,
                      suppress_health_check=[HealthCheck.too_slow])

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "Ring.Ops"
version = "0.3.0"
description = "A tiny op library"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["torch>=2.0", "numpy>=1.26"]
license = "MIT"

[tool.setuptools]
packages = ["ringops"]
package-data = {ringops = ["*.so"]}
"""
# A binary distribution without compiling anything: setuptools tags the wheel for this interpreter and
# platform (Root-Is-Purelib: false) as it would for a torch.utils.cpp_extension build.
SETUP_PY = """\
from setuptools import setup
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution)
"""
README = "# ringops\n\nA body  with  double spaces,\ttabs and a trailing blank line.\n\n"


@pytest.fixture(scope="session")
def backend_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny project built by setuptools' PEP 517 backend, as a frontend calls it."""
    src = tmp_path_factory.mktemp("ring-ops-src")
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "setup.py").write_text(SETUP_PY)
    (src / "README.md").write_text(README)
    (src / "LICENSE").write_text("MIT\n")
    (src / PACKAGE).mkdir()
    (src / PACKAGE / "__init__.py").write_text('"""ringops."""\n')
    extension = src / PACKAGE / "_C.so"
    extension.write_bytes(b"\x7fELF stand-in for a compiled extension")
    extension.chmod(0o755)
    out = tmp_path_factory.mktemp("backend-wheel")
    built = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_wheel(sys.argv[1]))", str(out)],
                           cwd=src, capture_output=True, text=True, check=True)
    return out / built.stdout.strip().splitlines()[-1]


def build_info(**changes: Any) -> dict[str, Any]:
    """What the lead's backend_build_info gives for a torch 2.14 CUDA 13.0 build (without the version)."""
    info: dict[str, Any] = {"schema": 1, "project": PROJECT, "package": PACKAGE, "namespace": PACKAGE,
                            "build": "backend", "libraries": "python-module", "abi_mode": "torch",
                            "torch_major_minor": "2.14", "cuda_tag": "cu130", "cuda": "13.0",
                            "python_tag": PYTHON_TAG, "torch_version": "2.14.1+cu130"}
    info.update(changes)
    return info


def relabel(wheel: Path, out_dir: Path, **changes: Any) -> Path:
    arguments: dict[str, Any] = {"package": PACKAGE, "project": PROJECT, "local_label": LABEL,
                                 "torch_requirement": PIN, "build_info": build_info(), "epoch": EPOCH}
    arguments.update(changes)
    return relabel_wheel(wheel, out_dir, **arguments)


def members(wheel: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of a wheel: its bytes and its Unix mode."""
    with zipfile.ZipFile(wheel) as zf:
        return {i.filename: (zf.read(i), i.external_attr >> 16) for i in zf.infolist() if not i.is_dir()}


def record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def record_for(files: dict[str, tuple[bytes, int]], record: str) -> bytes:
    text = io.StringIO()
    rows = [record_line(name, data) for name, (data, _mode) in files.items() if name != record]
    csv.writer(text, lineterminator="\n").writerows([*rows, [record, "", ""]])
    return text.getvalue().encode()


def write_wheel(path: Path, files: dict[str, tuple[bytes, int]], *, record: str | None = INPUT_DIST_INFO + "/RECORD",
                date_time: tuple[int, ...] = (2024, 5, 6, 7, 8, 10), level: int = 6) -> Path:
    """A wheel of ``files`` in their order; ``record``: the RECORD rewritten to list them (None: as given)."""
    if record is not None:
        files = {**files, record: (record_for(files, record), 0o644)}
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name, date_time)  # type: ignore[arg-type]
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=level)
    return path


def metadata_with(files: dict[str, tuple[bytes, int]], edit: Any, dist_info: str = INPUT_DIST_INFO
                  ) -> dict[str, tuple[bytes, int]]:
    """``files`` with METADATA's text passed through ``edit``."""
    name = f"{dist_info}/METADATA"
    data, mode = files[name]
    return {**files, name: (edit(data.decode()).encode(), mode)}


def with_version(files: dict[str, tuple[bytes, int]], version: str) -> dict[str, tuple[bytes, int]]:
    """The wheel's members respelled for ``version`` everywhere (dist-info folder, METADATA)."""
    files = metadata_with(files, lambda t: t.replace("Version: 0.3.0\n", f"Version: {version}\n"))
    folder = f"ring_ops-{version}.dist-info"
    return {name.replace(INPUT_DIST_INFO, folder): value for name, value in files.items()}


def assert_refused(wheel: Path, out_dir: Path, expected: str | None = None, **changes: Any) -> str:
    """One RelabelError line (naming ``expected``) and nothing left in the output folder."""
    out_dir.mkdir(exist_ok=True)
    with pytest.raises(RelabelError) as caught:
        relabel(wheel, out_dir, **changes)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message
    if expected is not None:
        assert expected in message
    assert list(out_dir.iterdir()) == []
    return message


# -- what comes out ------------------------------------------------------------------------------------------


def test_the_relabelled_wheel_is_a_kiln_wheel(backend_wheel: Path, tmp_path: Path) -> None:
    out = relabel(backend_wheel, tmp_path)
    assert out == tmp_path / f"ring_ops-0.3.0+{LABEL}-{PYTHON_TAG}-{PYTHON_TAG}-linux_x86_64.whl"
    with SafeZip(out) as archive:
        wheel = kiln_wheel.check_archive(kiln_wheel.check_name(out.name, PROJECT, PACKAGE), archive)
    assert wheel.torch_requirement in ("<2.15,>=2.14", ">=2.14,<2.15")
    assert wheel.build_info == {**build_info(), "version": f"0.3.0+{LABEL}"}
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_keep_version_pins_describes_and_guards_without_a_label(backend_wheel: Path, tmp_path: Path) -> None:
    """A build from kiln's sdist (kiln_tool.sdist_backend): pip wants the sdist's plain version back, so the wheel
    keeps 0.3.0 and gets everything else a relabelled wheel gets; the label is still held to kiln's rules."""
    out = relabel(backend_wheel, tmp_path / "out", keep_version=True)
    assert out.name == f"ring_ops-0.3.0-{PYTHON_TAG}-{PYTHON_TAG}-linux_x86_64.whl"
    files = members(out)
    metadata = files["ring_ops-0.3.0.dist-info/METADATA"][0].decode()
    assert "Version: 0.3.0\n" in metadata, metadata
    assert f"Requires-Dist: {PIN}" in metadata.replace("<2.15,>=2.14", ">=2.14,<2.15"), metadata
    assert json.loads(files[f"{PACKAGE}/_build_info.json"][0])["version"] == "0.3.0"
    assert any(name.startswith(f"{PACKAGE}/_kiln/") for name in files)
    with pytest.raises(RelabelError, match="local label"):
        relabel(backend_wheel, tmp_path / "bad", keep_version=True, local_label="PT214")


def test_pip_installs_the_relabelled_wheel(backend_wheel: Path, tmp_path: Path) -> None:
    out = relabel(backend_wheel, tmp_path / "out")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir",
                    "--disable-pip-version-check", "--target", str(target), str(out)],
                   check=True, capture_output=True)
    (dist,) = importlib.metadata.distributions(path=[str(target)])
    assert dist.version == f"0.3.0+{LABEL}"
    assert sorted(dist.requires or []) == ["numpy>=1.26", PIN]
    assert json.loads((target / PACKAGE / "_build_info.json").read_text())["version"] == f"0.3.0+{LABEL}"
    assert (target / PACKAGE / "_C.so").stat().st_mode & 0o111
    assert not (target / PACKAGE / "__init__.py").stat().st_mode & 0o111


def test_metadata_keeps_every_line_but_the_version_and_the_torch_pin(backend_wheel: Path, tmp_path: Path) -> None:
    before = members(backend_wheel)[f"{INPUT_DIST_INFO}/METADATA"][0]
    after = members(relabel(backend_wheel, tmp_path))[f"{OUTPUT_DIST_INFO}/METADATA"][0]
    head_before, body_before = before.split(b"\n\n", 1)
    head_after, body_after = after.split(b"\n\n", 1)
    assert body_after == body_before
    expected = [b"Version: 0.3.0+pt214cu130" if line == b"Version: 0.3.0" else
                b"Requires-Dist: " + PIN.encode() if line == b"Requires-Dist: torch>=2.0" else line
                for line in head_before.split(b"\n")]
    assert head_after.split(b"\n") == expected
    old, new = Metadata.from_email(before), Metadata.from_email(after)
    for field in ("name", "summary", "requires_python", "license_expression", "license_files",
                  "description", "description_content_type", "dynamic", "metadata_version"):
        assert getattr(new, field) == getattr(old, field), field


@pytest.mark.parametrize(("requirements", "expected"), [
    ("Requires-Dist: numpy>=1.26\n", ["numpy>=1.26", PIN]),
    ("", [PIN]),
    ('Requires-Dist: torch; extra == "gpu"\nRequires-Dist: numpy>=1.26\nRequires-Dist: Torch (>=1.0)\n',
     [PIN, "numpy>=1.26"]),
    ("Requires-Dist: torch>=2.0\nRequires-Dist: torch<3\n", [PIN]),
], ids=["no-torch", "no-requirements", "conditional-and-old-style", "two-pins"])
def test_exactly_one_unconditional_torch_pin(backend_wheel: Path, tmp_path: Path, requirements: str,
                                             expected: list[str]) -> None:
    def edit(text: str) -> str:
        return text.replace("Requires-Dist: torch>=2.0\nRequires-Dist: numpy>=1.26\n", requirements)

    wheel = write_wheel(tmp_path / backend_wheel.name, metadata_with(members(backend_wheel), edit))
    out = relabel(wheel, tmp_path / "out")
    metadata = Metadata.from_email(members(out)[f"{OUTPUT_DIST_INFO}/METADATA"][0], validate=True)
    assert [str(r) for r in metadata.requires_dist or []] == [str(Requirement(e)) for e in expected]


def test_layout_dates_and_modes_are_fixed(backend_wheel: Path, tmp_path: Path) -> None:
    out = relabel(backend_wheel, tmp_path)
    with zipfile.ZipFile(out) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    package_part = [n for n in names if not n.startswith(OUTPUT_DIST_INFO)]
    dist_info = [n for n in names if n.startswith(OUTPUT_DIST_INFO)]
    assert names == package_part + dist_info
    assert package_part == sorted(package_part) == ["ringops/_C.so", "ringops/__init__.py",
                                                    "ringops/_build_info.json",
                                                    *sorted(f"ringops/_kiln/{n}" for n in guard_files())]
    assert dist_info[-1] == f"{OUTPUT_DIST_INFO}/RECORD" and dist_info[:-1] == sorted(dist_info[:-1])
    assert f"{OUTPUT_DIST_INFO}/top_level.txt" not in names  # setuptools' egg-era file; no installer reads it
    assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
    modes = {i.filename: i.external_attr >> 16 for i in infos}
    assert modes.pop("ringops/_C.so") == stat.S_IFREG | 0o755
    assert set(modes.values()) == {stat.S_IFREG | 0o644}
    assert members(out)[f"{OUTPUT_DIST_INFO}/WHEEL"][0] == members(backend_wheel)[f"{INPUT_DIST_INFO}/WHEEL"][0]
    info = members(out)["ringops/_build_info.json"][0]
    assert info == (json.dumps(json.loads(info), sort_keys=True, indent=2) + "\n").encode()


@pytest.mark.parametrize(("epoch", "date"), [("0", (1980, 1, 1, 0, 0, 0)), ("-5", (1980, 1, 1, 0, 0, 0)),
                                             ("315532800", (1980, 1, 1, 0, 0, 0)),
                                             ("1700000001", (2023, 11, 14, 22, 13, 20))])
def test_the_date_is_source_date_epoch_clamped_to_1980(backend_wheel: Path, tmp_path: Path, epoch: str,
                                                       date: tuple[int, ...]) -> None:
    with zipfile.ZipFile(relabel(backend_wheel, tmp_path, epoch=epoch)) as zf:
        assert {i.date_time for i in zf.infolist()} == {date}


def test_the_same_input_gives_the_same_bytes(backend_wheel: Path, tmp_path: Path) -> None:
    first = relabel(backend_wheel, tmp_path / "a").read_bytes()
    assert relabel(backend_wheel, tmp_path / "b").read_bytes() == first
    # The same files zipped otherwise (order, dates, compression, mode bits beyond the exec bit): the same bytes.
    files = members(backend_wheel)
    shuffled = {name: (data, (mode | 0o020) & ~0o004) for name, (data, mode) in reversed(files.items())}
    (tmp_path / "c").mkdir()
    rezipped = write_wheel(tmp_path / "c" / backend_wheel.name, shuffled, record=None,
                           date_time=(2030, 1, 2, 3, 4, 6), level=1)
    assert relabel(rezipped, tmp_path / "d").read_bytes() == first
    assert relabel(backend_wheel, tmp_path / "e", epoch="1700000002").read_bytes() != first


def test_a_wheel_that_fails_the_kiln_definition_after_writing_leaves_nothing(backend_wheel: Path,
                                                                            tmp_path: Path) -> None:
    info = build_info()
    del info["torch_version"]
    assert_refused(backend_wheel, tmp_path / "out", "build info: lacks torch_version", build_info=info)
    assert_refused(backend_wheel, tmp_path / "out", "torch requirement", torch_requirement="torch>=2.13,<2.15")


def test_the_output_folder_is_created(backend_wheel: Path, tmp_path: Path) -> None:
    assert relabel(backend_wheel, tmp_path / "a" / "b").parent == tmp_path / "a" / "b"


# -- refusals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "expected"), [
    ({"local_label": "PT214"}, "local label"),
    ({"local_label": "pt214.cu130"}, "local label"),
    ({"local_label": ""}, "local label"),
    ({"torch_requirement": "numpy>=1.26"}, "torch requirement"),
    ({"torch_requirement": "torch"}, "torch requirement"),
    ({"torch_requirement": "torch[cuda]>=2.14,<2.15"}, "torch requirement"),
    ({"torch_requirement": "torch>=2.14,<2.15; python_version > '3'"}, "torch requirement"),
    ({"torch_requirement": "torch>=2.14\nRequires-Dist: evil"}, "torch requirement"),
    ({"torch_requirement": "torch @ https://example.org/torch.whl"}, "torch requirement"),
    ({"epoch": "yesterday"}, "SOURCE_DATE_EPOCH"),
    ({"package": "ring-ops"}, "package"),
    ({"package": "other", "build_info": build_info(package="other")}, "no package other/"),
    ({"project": "Ring Ops!"}, "project"),
    ({"build_info": build_info(package="other")}, "build info: package"),
    ({"build_info": build_info(cuda=float("nan"))}, "build info: not JSON"),
    ({"build_info": build_info(when=object())}, "build info: not JSON"),
], ids=lambda value: str(value)[:40])
def test_bad_arguments_are_refused(backend_wheel: Path, tmp_path: Path, changes: dict[str, Any],
                                   expected: str) -> None:
    assert_refused(backend_wheel, tmp_path / "out", expected, **changes)


def _edit_wheel_file(text: str) -> Any:
    return lambda files: {**files, f"{INPUT_DIST_INFO}/WHEEL": (text.encode(), 0o644)}


WHEEL_TEXT = ("Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: false\n"
              f"Tag: {PYTHON_TAG}-{PYTHON_TAG}-linux_x86_64\n\n")


@pytest.mark.parametrize(("edit", "expected"), [
    (_edit_wheel_file(WHEEL_TEXT.replace("false", "true")), "a pure wheel"),
    (_edit_wheel_file(WHEEL_TEXT.replace("Generator: setuptools\n", "Build: 1\n")), "the backend set a build tag"),
    (_edit_wheel_file(WHEEL_TEXT.replace("linux_x86_64", "linux_aarch64")), "Tag lines"),
    (_edit_wheel_file(WHEEL_TEXT.replace("\n\n", "\nTag: py3-none-linux_x86_64\n\n")), "Tag lines"),
    (lambda f: {**f, "ringops/_build_info.json": (b"{}", 0o644)}, "ships a build info"),
    (lambda f: {**f, "ringops/sub/_Build_Info.JSON": (b"{}", 0o644)}, "ships a build info"),
    (lambda f: {**f, f"{INPUT_DIST_INFO}/entry_points.txt": (b"[console_scripts]\npip = x:y\n", 0o644)},
     "entry points"),
    (lambda f: {**f, "ring_ops-0.3.0.data/scripts/pip": (b"#!python\n", 0o755)}, ".data folder"),
    (lambda f: {**f, "sitecustomize.py": (b"import os\n", 0o644)}, "sitecustomize.py"),
    (lambda f: {k: v for k, v in f.items() if not k.endswith("/METADATA")}, "METADATA"),
    (lambda f: {k.replace(INPUT_DIST_INFO, "ring_ops-0.4.0.dist-info"): v for k, v in f.items()}, "0.4.0.dist-info"),
    (lambda f: metadata_with(f, lambda t: t.replace("Version: 0.3.0", "Version: 0.3.1")), "Version '0.3.1'"),
    (lambda f: metadata_with(f, lambda t: t.replace("Name: Ring.Ops", "Name: ring-opz")), "Name"),
    (lambda f: metadata_with(f, lambda t: t.replace("Version: 0.3.0\n", "Version: 0.3.0\nVersion: 0.3.0\n")),
     "METADATA"),
], ids=["pure", "build-line", "wrong-tag", "extra-tag", "build-info", "nested-build-info", "entry-points",
        "data", "sitecustomize", "no-metadata", "dist-info-version", "metadata-version", "metadata-name",
        "two-versions"])
def test_wheels_kiln_cannot_relabel_are_refused(backend_wheel: Path, tmp_path: Path, edit: Any,
                                                expected: str) -> None:
    wheel = write_wheel(tmp_path / backend_wheel.name, edit(members(backend_wheel)))
    assert_refused(wheel, tmp_path / "out", expected)


def test_what_is_no_wheel_is_refused(backend_wheel: Path, tmp_path: Path) -> None:
    assert_refused(tmp_path / backend_wheel.name, tmp_path / "out", "no such wheel file")
    (tmp_path / backend_wheel.name).write_bytes(b"not a zip")
    assert_refused(tmp_path / backend_wheel.name, tmp_path / "out", "not a readable zip archive")
    link = zipfile.ZipInfo("ringops/link.so")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(tmp_path / backend_wheel.name, "w") as zf:
        zf.writestr(link, "/etc/passwd")
    assert_refused(tmp_path / backend_wheel.name, tmp_path / "out", "symbolic link")


# -- refusals, generated -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def backend_files(backend_wheel: Path) -> dict[str, tuple[bytes, int]]:
    return members(backend_wheel)


def _refused_in_tmp(name: str, files: dict[str, tuple[bytes, int]], expected: str | None = None,
                    record: str | None = INPUT_DIST_INFO + "/RECORD", **changes: Any) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        wheel = write_wheel(Path(tmp) / name, files, record=record)
        return assert_refused(wheel, Path(tmp) / "out", expected, **changes)


WHEEL_NAME = f"ring_ops-0.3.0-{PYTHON_TAG}-{PYTHON_TAG}-linux_x86_64.whl"


@HYPOTHESIS
@given(label=st.from_regex(r"[a-z0-9]{1,8}(\.[a-z0-9]{1,4}){0,2}", fullmatch=True))
def test_a_label_the_backend_set_is_refused(backend_files: dict[str, tuple[bytes, int]], label: str) -> None:
    version = f"0.3.0+{label}"
    files = with_version(backend_files, version)
    _refused_in_tmp(WHEEL_NAME.replace("0.3.0", version), files, "kiln sets the label",
                    record=f"ring_ops-{version}.dist-info/RECORD")


@HYPOTHESIS
@given(build=st.from_regex(r"[0-9]{1,3}[a-z_]{0,4}", fullmatch=True), in_name=st.booleans())
def test_a_build_tag_is_refused(backend_files: dict[str, tuple[bytes, int]], build: str, in_name: bool) -> None:
    wheel_file = f"{INPUT_DIST_INFO}/WHEEL"
    text = backend_files[wheel_file][0].decode().replace("Root-Is-Purelib", f"Build: {build}\nRoot-Is-Purelib")
    files = {**backend_files, wheel_file: (text.encode(), 0o644)}
    name = WHEEL_NAME.replace("0.3.0", f"0.3.0-{build}") if in_name else WHEEL_NAME
    expected = "the backend's file name has a build tag" if in_name else "the backend set a build tag"
    _refused_in_tmp(name, files, expected)


@HYPOTHESIS
@given(folder=st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}-[0-9]{1,2}(\.[0-9]{1,2}){0,2}\.dist-info", fullmatch=True))
def test_two_dist_info_folders_are_refused(backend_files: dict[str, tuple[bytes, int]], folder: str) -> None:
    if folder.casefold() == INPUT_DIST_INFO:
        return
    files = {**backend_files, f"{folder}/METADATA": (b"Metadata-Version: 2.1\nName: x\nVersion: 1\n", 0o644)}
    _refused_in_tmp(WHEEL_NAME, files, ".dist-info folders")


@HYPOTHESIS
@given(project=st.from_regex(r"[a-z][a-z0-9]{0,10}(-[a-z0-9]{1,5}){0,2}", fullmatch=True), where=st.booleans())
def test_another_project_is_refused(backend_files: dict[str, tuple[bytes, int]], project: str, where: bool) -> None:
    if project == PROJECT:
        return
    if where:  # kiln was told another project
        _refused_in_tmp(WHEEL_NAME, backend_files, "not of this project", project=project,
                        build_info=build_info(project=project))
    else:  # METADATA names another project than the file name
        files = metadata_with(backend_files, lambda t: t.replace("Name: Ring.Ops", f"Name: {project}"))
        _refused_in_tmp(WHEEL_NAME, files, "METADATA: Name")


RECORD_LIES = {"hash": "is not the file RECORD describes", "size": "is not the file RECORD describes",
               "missing": "does not list exactly", "extra": "does not list exactly",
               "algorithm": "is not a sha256 hash and a size", "short": "a malformed or repeated line"}


def lying_record(files: dict[str, tuple[bytes, int]], victim: str, lie: str, draw: Any = None
                 ) -> dict[str, tuple[bytes, int]]:
    """``files`` with a RECORD that lies about ``victim`` (``draw``: where the lie's value comes from)."""
    record = f"{INPUT_DIST_INFO}/RECORD"
    listed = {name: value for name, value in files.items() if name != record}
    rows = [record_line(name, content) for name, (content, _mode) in listed.items()]
    row = next(r for r in rows if r[0] == victim)
    content = listed[victim][0]
    if lie == "hash":
        other = content + b"!" if draw is None else draw(st.binary(max_size=64).filter(lambda b: b != content))
        row[1] = record_line(victim, other)[1]
    elif lie == "size":
        row[2] = str(len(content) + 1 if draw is None else
                     draw(st.integers(0, 10**9).filter(lambda n: n != len(content))))
    elif lie == "missing":
        rows.remove(row)
    elif lie == "extra":
        rows.append(record_line(f"{victim}.ghost", b""))
    elif lie == "algorithm":
        row[1] = "sha512=" + base64.urlsafe_b64encode(hashlib.sha512(content).digest()).rstrip(b"=").decode()
    else:
        row.pop()
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([*rows, [record, "", ""]])
    return {**listed, record: (text.getvalue().encode(), 0o644)}


@pytest.mark.parametrize("victim", [f"{INPUT_DIST_INFO}/{part}" for part in ("METADATA", "WHEEL", "top_level.txt",
                                                                             "licenses/LICENSE")]
                         + ["ringops/_C.so", "ringops/__init__.py"])
def test_record_lying_about_any_member_is_refused(backend_files: dict[str, tuple[bytes, int]], victim: str) -> None:
    """Also the members kiln rewrites (METADATA) or drops (top_level.txt): the input is checked whole."""
    assert victim in backend_files
    _refused_in_tmp(WHEEL_NAME, lying_record(backend_files, victim, "hash"), RECORD_LIES["hash"], record=None)


@HYPOTHESIS
@given(data=st.data(), lie=st.sampled_from(sorted(RECORD_LIES)))
def test_a_lying_record_is_refused(backend_files: dict[str, tuple[bytes, int]], data: st.DataObject,
                                   lie: str) -> None:
    victim = data.draw(st.sampled_from(sorted(set(backend_files) - {f"{INPUT_DIST_INFO}/RECORD"})))
    _refused_in_tmp(WHEEL_NAME, lying_record(backend_files, victim, lie, data.draw), RECORD_LIES[lie], record=None)


BAD_METADATA = st.one_of(
    st.from_regex(r"[a-z]{1,6} [a-z]{1,6}", fullmatch=True).map(lambda v: ("Version: 0.3.0", f"Version: {v}")),
    st.from_regex(r"[3-9]\.[0-9]", fullmatch=True).map(lambda v: ("Metadata-Version: 2.4", f"Metadata-Version: {v}")),
    st.from_regex(r"[a-z]{1,6} ?(>>|=<|\?\?|@@)[0-9]{1,3}", fullmatch=True)
    .map(lambda v: ("Requires-Dist: numpy>=1.26", f"Requires-Dist: {v}")),
    st.from_regex(r"(>>|=>|~)[a-z]{1,4}", fullmatch=True)
    .map(lambda v: ("Requires-Python: >=3.10", f"Requires-Python: {v}")),
    st.from_regex(r"[A-Za-z]{1,5}[ !/]{1,2}[A-Za-z]{1,5}", fullmatch=True).map(lambda v: ("Name: Ring.Ops",
                                                                                       f"Name: {v}")),
    st.sampled_from([("Metadata-Version: 2.4", "Metadata-Version: 2.1"), ("Name: Ring.Ops\n", ""),
                     ("Version: 0.3.0\n", ""), ("Summary: A tiny op library", "Summary: one\nline")]),
)


@HYPOTHESIS
@given(edit=BAD_METADATA)
def test_metadata_packaging_refuses_is_refused(backend_files: dict[str, tuple[bytes, int]],
                                               edit: tuple[str, str]) -> None:
    old, new = edit
    files = metadata_with(backend_files, lambda t: t.replace(old, new, 1))
    assert files != backend_files
    _refused_in_tmp(WHEEL_NAME, files, "METADATA")


ODD_PART = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00/"), min_size=1,
                   max_size=12).filter(lambda part: not NAME_PART.fullmatch(part))


@HYPOTHESIS
@given(part=ODD_PART, where=st.sampled_from(["ringops/{}", "ringops/{}/x.py", "{}", f"{INPUT_DIST_INFO}/{{}}",
                                             "ringops.libs/{}"]))
def test_member_names_kiln_never_writes_are_refused(backend_files: dict[str, tuple[bytes, int]], part: str,
                                                    where: str) -> None:
    _refused_in_tmp(WHEEL_NAME, {**backend_files, where.format(part): (b"x", 0o644)})


@HYPOTHESIS
@given(part=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00/"), min_size=1,
                    max_size=8).filter(lambda p: re.search(r"[^A-Za-z0-9_.-]", p) is not None))
def test_wheel_file_names_with_odd_characters_are_refused(backend_files: dict[str, tuple[bytes, int]],
                                                           part: str) -> None:
    name = WHEEL_NAME.replace("ring_ops", f"ring{part}_ops", 1)
    if len(name.encode()) > 255:
        return
    _refused_in_tmp(name, backend_files)


# -- kiln label: the command a cibuildwheel repair step runs on a backend's wheel ------------------------------

KILN = [sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / "kiln")]


REGISTERING_SOURCE = """\
#include <torch/library.h>
static int64_t twice(int64_t x) { return 2 * x; }
TORCH_LIBRARY(ringops, m) { m.def("twice(int x) -> int", &twice); }
"""


@pytest.fixture(scope="session")
def registering_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The backend's wheel with a real extension that registers ringops::twice: kiln label loads the wheel's
    libraries with the torch beside its Python for the op manifest (about 10 s of g++ cold, ccache after)."""
    import shutil

    import torch

    src = tmp_path_factory.mktemp("ring-ops-registering")
    for name, text in (("pyproject.toml", PYPROJECT), ("setup.py", SETUP_PY), ("README.md", README),
                       ("LICENSE", "MIT\n"), ("twice.cpp", REGISTERING_SOURCE)):
        (src / name).write_text(text)
    (src / PACKAGE).mkdir()
    (src / PACKAGE / "__init__.py").write_text('"""ringops."""\n')
    root = Path(torch.__file__).parent
    compiler = [c for c in (shutil.which("ccache"),) if c] + ["g++"]
    subprocess.run([*compiler, "-std=c++20", "-O0", "-fPIC", "-shared", "twice.cpp", "-I", str(root / "include"),
                    "-L", str(root / "lib"), "-lc10", "-ltorch_cpu", "-o", f"{PACKAGE}/_C.so"], cwd=src, check=True)
    out = tmp_path_factory.mktemp("registering-wheel")
    built = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_wheel(sys.argv[1]))", str(out)],
                           cwd=src, capture_output=True, text=True, check=True)
    return out / built.stdout.strip().splitlines()[-1]


def _label_project(root: Path, build: str) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT.replace("[tool.setuptools]", f"""[tool.kiln]
package = "{PACKAGE}"
build = "{build}"
version = "0.3.0"

[tool.setuptools]"""))
    return root


def test_kiln_label_labels_a_backend_wheel_for_the_torch_beside_its_python(registering_wheel: Path,
                                                                          tmp_path: Path) -> None:
    import torch  # the dev venv's: the wheel is labelled for it

    minor = "".join(torch.__version__.split(".")[:2])
    project = _label_project(tmp_path / "project", "backend")
    run = subprocess.run([*KILN, "-C", str(project), "label", str(registering_wheel), "-w", str(tmp_path / "out")],
                         capture_output=True, text=True, check=False, env={
                             **{k: v for k, v in os.environ.items() if not k.startswith("KILN_")},
                             "KILN_VARIANT": "cpu", "SOURCE_DATE_EPOCH": "1700000000"})
    assert run.returncode == 0, run.stderr
    (out,) = (tmp_path / "out").glob("*.whl")
    assert Path(run.stdout.strip()) == out
    assert out.name.startswith(f"ring_ops-0.3.0+pt{minor}cpu-")
    with SafeZip(out) as archive:
        checked = kiln_wheel.check_archive(kiln_wheel.check_name(out.name, PROJECT, PACKAGE), archive)
    info = checked.build_info
    assert (info["build"], info["package"], info["project"], info["torch_version"]) == (
        "backend", PACKAGE, PROJECT, torch.__version__)
    assert info["ops"] == ["ringops::twice"], "the manifest is what the library registers once loaded"
    major_s, minor_s = torch.__version__.split(".")[:2]
    assert checked.torch_requirement in (f">={major_s}.{minor_s},<{major_s}.{int(minor_s) + 1}",
                                         f"<{major_s}.{int(minor_s) + 1},>={major_s}.{minor_s}")


def test_kiln_label_refuses_a_library_that_registers_nothing_in_its_namespace(backend_wheel: Path,
                                                                            tmp_path: Path) -> None:
    """The stand-in extension loads nothing torch would see: labelled, the guard would prove no op."""
    project = _label_project(tmp_path / "project", "backend")
    run = subprocess.run([*KILN, "-C", str(project), "label", str(backend_wheel), "-w", str(tmp_path / "out")],
                         capture_output=True, text=True, check=False, env={**os.environ, "KILN_VARIANT": "cpu"})
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "ringops/_C.so: Could not load this library" in run.stderr, run.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_kiln_label_refuses_a_kiln_built_project_and_a_labelled_wheel(registering_wheel: Path,
                                                                      tmp_path: Path) -> None:
    kiln_built = _label_project(tmp_path / "kiln-built", "kiln")
    run = subprocess.run([*KILN, "-C", str(kiln_built), "label", str(registering_wheel), "-w", str(tmp_path / "a")],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "metadata provider labels it" in run.stderr, run.stderr
    assert not (tmp_path / "a").exists()
    project = _label_project(tmp_path / "backend", "backend")
    first = subprocess.run([*KILN, "-C", str(project), "label", str(registering_wheel), "-w", str(tmp_path / "b")],
                           capture_output=True, text=True, check=False, env={**os.environ, "KILN_VARIANT": "cpu"})
    assert first.returncode == 0, first.stderr
    (labelled,) = (tmp_path / "b").glob("*.whl")
    again = subprocess.run([*KILN, "-C", str(project), "label", str(labelled), "-w", str(tmp_path / "c")],
                           capture_output=True, text=True, check=False, env={**os.environ, "KILN_VARIANT": "cpu"})
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already has a local label" in again.stderr
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())
