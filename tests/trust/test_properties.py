"""Generated hostile input (hypothesis) over wheel names, METADATA, manifests and zip structures.

For every generated case: no traceback, an exit code in {0, 1, 2}, nothing outside the output folder
changes, and a refused run leaves the site byte for byte as it was. Cases run through kiln's Python
entry (kiln_tool.cli.main) in-process; a few fixed ones run as real subprocesses at the end.
Example counts are modest and the runs derandomized (no example database), so CI is deterministic.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.synthetic_wheels import make_wheel
from trust.hostile_zips import SYMLINK, add_members, corrupt_deflate, member, set_declared_size
from trust.kiln_runs import assert_kept_promises, kiln, kiln_subprocess, outside, tree

PROFILE = settings(max_examples=30, derandomize=True, database=None, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SCHEMA = Path(__file__).resolve().parents[2] / "src" / "kiln_tool" / "index" / "kiln-index.schema.json"

HOSTILE = ["..", "../", "/", "\\", "<", ">", "&", '"', "'", "%2F", "\u2028", " ", "+", "!", "#", "?", "\x7f", "é",
           "ſ", "K", "\u0130", "~", "$", "{", "}", ":", ";", "*"]


@pytest.fixture(scope="module")
def base_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A published site (one wheel), copied fresh for every generated case."""
    root = tmp_path_factory.mktemp("base")
    make_wheel(root / "dist")
    run = kiln("index", root / "dist", root / "site")
    assert run.code == 0, run.stderr
    return root / "site"


@pytest.fixture
def workspace(base_site: Path) -> Iterator[Any]:
    def fresh() -> tuple[Path, Path]:
        root = Path(tempfile.mkdtemp(prefix="kiln-prop-"))
        made.append(root)
        shutil.copytree(base_site, root / "site", symlinks=True)
        return root, root / "site"

    made: list[Path] = []
    yield fresh
    for root in made:
        shutil.rmtree(root, ignore_errors=True)


def _run_index(root: Path, out: Path, *extra: str) -> None:
    before_site, before_outside = tree(out), outside(root, out)
    run = kiln("index", *extra, root / "dist", out)
    assert_kept_promises(run, root, out, before_outside, before_site)
    if run.code == 0:
        doc = json.loads((out / "kiln-index.json").read_text())
        jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(doc)
        for entry in doc["wheels"]:
            assert (out / "wheels" / entry["filename"]).is_file()


names = st.sampled_from(["opkiln", "OpKiln", "op_kiln", "Op.Kiln", "op--kiln", "o", "", "1"])
versions = st.sampled_from(["0.1.0+pt213cpu", "0.1.0.0+pt213cpu", "0.1.0+PT213CPU", "v0.1.0+pt213cpu", "0.2",
                            "1!0.1.0", "0.1.0-1", "0.1.0.post1.dev2", "abc", "0.1.0+", "", "0.1.0+a..b"])
tags = st.sampled_from(["cp311-cp311-linux_x86_64", "cp311-cp311-linux_x86_64.manylinux_2_28_x86_64",
                        "cp310-abi3-linux_x86_64", "py3-none-any", "cp311-cp311", "x-y-z", "cp311-cp311-linux x86"])
builds = st.sampled_from([None, "1", "01", "1a", "a1", ""])
def _joined(alphabet: list[str], min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(alphabet), min_size=min_size, max_size=max_size).map("".join)


pieces = _joined(HOSTILE + list("abc019._-"))


@st.composite
def wheel_names(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        parts = [draw(names), draw(versions)]
        build = draw(builds)
        if build is not None:
            parts.append(build)
        parts.append(draw(tags))
        return "-".join(parts) + draw(st.sampled_from([".whl", ".WHL", ".whl.whl", ""]))
    return draw(pieces) + draw(st.sampled_from([".whl", ""]))


def _usable_file_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..") \
        and len(name.encode()) < 240


@PROFILE
@given(filename=wheel_names(), version=versions)
def test_wheel_names(workspace: Any, filename: str, version: str) -> None:
    if not _usable_file_name(filename):
        return
    root, out = workspace()
    (root / "dist").mkdir()
    try:
        make_wheel(root / "dist", filename=filename, version=version or "0.1.0", torch_requirement="torch>=2.13")
    except (ValueError, OSError):
        return  # a name the file system (or zipfile) itself refuses is no input to kiln
    _run_index(root, out)


@settings(max_examples=300, derandomize=True, database=None)
@given(filename=wheel_names())
def test_wheel_name_parsing_is_packagings(filename: str) -> None:
    """kiln's memoized wheel-name parser gives packaging's verdict and parts for every name."""
    from packaging.tags import InvalidTag
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion

    from kiln_tool.index.errors import IndexInputError
    from kiln_tool.index.wheels import SAFE_WHEEL_NAME, check_wheel_name

    try:
        expected: object = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion, InvalidTag):
        expected = None
    try:
        got: object = check_wheel_name(filename)
    except IndexInputError:
        got = None
    if SAFE_WHEEL_NAME.fullmatch(filename) and len(filename) <= 200:
        assert got == expected
    else:
        assert got is None


header_keys = st.sampled_from(["Name", "Version", "Requires-Python", "Requires-Dist", "Metadata-Version",
                               "Summary", "name", "VERSION", "", " Name", "Name "])
header_values = st.one_of(st.sampled_from(["opkiln", "0.1.0+pt213cpu", "0.1.0.0+pt213cpu", ">=3.10", "torch>=2.13",
                                           "torch<2.14,>=2.13", "<script>", "../..", "", "\u2028", "opkiln\n x"]),
                          st.text(max_size=30))


@st.composite
def metadata_files(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=200))
    lines = [f"{draw(header_keys)}: {draw(header_values)}" for _ in range(draw(st.integers(0, 8)))]
    if draw(st.booleans()):
        lines = ["Metadata-Version: 2.4", "Name: opkiln", "Version: 0.2.0+pt213cpu", *lines]
    text = "\n".join(lines) + draw(st.sampled_from(["\n\n", "\n", "", "\r\n\r\nbody"]))
    return text.encode("utf-8", "surrogatepass") if draw(st.booleans()) else text.encode("utf-8", "replace")


def _replace_member(wheel: Path, name: str, data: bytes) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info, content in members:
            zf.writestr(info, data if info.filename == name else content)


@PROFILE
@given(metadata=metadata_files())
def test_metadata(workspace: Any, metadata: bytes) -> None:
    root, out = workspace()
    wheel = make_wheel(root / "dist", version="0.2.0+pt213cpu")
    _replace_member(wheel, "opkiln-0.2.0+pt213cpu.dist-info/METADATA", metadata)
    _run_index(root, out)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True)
    | _joined(HOSTILE + list("abcdef0123456789."), max_size=70),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
ENTRY_KEYS = ["filename", "project", "version", "sha256", "size", "metadata_sha256", "requires_python",
              "torch_requirement", "abi_mode", "cuda_tag", "torch_major_minor", "python_tag", "platforms", "combos",
              "unknown"]


@st.composite
def manifest_edits(draw: st.DrawFn) -> list[tuple[str, str | None, Any]]:
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "entry", "entry", "entry", "drop"]))
        if where == "top":
            edits.append(("top", draw(st.sampled_from(["schema", "base_url", "wheels", "generator", "x"])),
                          draw(json_values)))
        elif where == "drop":
            edits.append(("drop", draw(st.sampled_from(ENTRY_KEYS)), None))
        else:
            edits.append(("entry", draw(st.sampled_from(ENTRY_KEYS)), draw(json_values)))
    return edits


@PROFILE
@given(edits=manifest_edits())
def test_manifests(workspace: Any, edits: list[tuple[str, str | None, Any]]) -> None:
    root, out = workspace()
    path = out / "kiln-index.json"
    doc = json.loads(path.read_text())
    for where, key, value in edits:
        assert key is not None
        if where == "top":
            doc[key] = value
        elif isinstance(doc.get("wheels"), list) and doc["wheels"] and isinstance(doc["wheels"][0], dict):
            if where == "drop":
                doc["wheels"][0].pop(key, None)
            else:
                doc["wheels"][0][key] = value
    path.write_text(json.dumps(doc))
    make_wheel(root / "dist", version="0.2.0+pt213cpu")

    from kiln_tool.index.manifest import schema_problem

    reference = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    if isinstance(doc, dict) and doc.get("schema") == 1:
        assert (schema_problem(doc) is None) == reference.is_valid(doc), "the fast validator disagrees"
    _run_index(root, out)


member_names = st.one_of(
    st.sampled_from(["opkiln/x.py", "opkiln/x.so", "/abs.py", "../up.py", "opkiln/../../up.py", "a\\b.py",
                     "opkiln/__init__.py", "opkiln//x.py", "opkiln/x.py/", "C:/x.py", "opkiln/dir/",
                     "opkiln-0.1.0+pt213cpu.dist-info/METADATA", "x\0y"]),
    _joined(HOSTILE + list("abc/."), min_size=1),
)


@st.composite
def zip_changes(draw: st.DrawFn) -> dict[str, Any]:
    members = [(draw(member_names), draw(st.sampled_from([0o100644, SYMLINK, 0o40755, 0])),
                draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])),
                draw(st.binary(max_size=64)) if draw(st.booleans()) else bytes(draw(st.integers(0, 3 << 20))))
               for _ in range(draw(st.integers(0, 3)))]
    return {"members": members, "corrupt": draw(st.booleans()),
            "lie": draw(st.none() | st.integers(0, 2**32 - 1)),
            "flip": draw(st.none() | st.integers(0, 10_000))}


def _hostile_wheel(directory: Path, changes: dict[str, Any]) -> Path:
    wheel = make_wheel(directory, version="0.2.0+pt213cpu", platform="manylinux_2_28_x86_64")
    extra = []
    for name, mode, method, data in changes["members"]:
        if "\0" in name:
            continue  # zipfile cuts names at NUL itself
        extra.append((member(name, mode=mode, method=method), data))
    add_members(wheel, extra)
    if changes["corrupt"]:
        corrupt_deflate(wheel)
    if changes["lie"] is not None:
        set_declared_size(wheel, "opkiln/_build_info.json", changes["lie"])
    if changes["flip"] is not None:
        data = bytearray(wheel.read_bytes())
        data[changes["flip"] % len(data)] ^= 0x5A
        wheel.write_bytes(bytes(data))
    return wheel


@PROFILE
@given(changes=zip_changes())
def test_zip_structures(workspace: Any, changes: dict[str, Any]) -> None:
    from kiln_tool.safezip import SafeZip, UnsafeArchiveError

    root, out = workspace()
    wheel = _hostile_wheel(root / "dist", changes)
    try:
        with SafeZip(wheel) as archive:
            archive.verify()
    except UnsafeArchiveError:
        pass  # the only way the safe reader may fail
    from kiln_tool.repair import RepairInputError, check_wheel_input

    with contextlib.suppress(RepairInputError):
        check_wheel_input(wheel)  # what `kiln repair` checks before auditwheel may see the wheel
    _run_index(root, out)
    before = tree(root)
    audit = kiln("audit", wheel)
    assert audit.code in (0, 1, 2) and "Traceback" not in audit.stderr + audit.stdout
    assert "cannot use this input" not in audit.stderr, audit.stderr
    assert tree(root) == before


@pytest.mark.parametrize("case", ["manifest", "bomb"])
def test_real_subprocess_runs_keep_the_promises(case: str, tmp_path: Path) -> None:
    from trust.hostile_zips import bomb

    out = tmp_path / "site"
    make_wheel(tmp_path / "dist0")
    assert kiln_subprocess("index", tmp_path / "dist0", out).code == 0
    if case == "manifest":
        path = out / "kiln-index.json"
        doc = json.loads(path.read_text())
        doc["wheels"][0]["project"] = {"nested": ["../../x"]}
        path.write_text(json.dumps(doc))
        make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")
    else:
        bomb(tmp_path / "dist", version="0.2.0+pt213cpu")
    before_site, before_outside = tree(out), outside(tmp_path, out)
    run = kiln_subprocess("index", tmp_path / "dist", out)
    assert run.code == 2
    assert_kept_promises(run, tmp_path, out, before_outside, before_site)
    assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]
