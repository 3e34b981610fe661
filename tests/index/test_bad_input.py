"""Bad input to `kiln index`: a clear error, exit 2, and nothing written (a new OUT is not created,
an existing one is left byte for byte as it was).

The cases run `kiln index` in this process (index.helpers.kiln_index_in_process); one runs the command as a
maintainer does (test_bad_input_leaves_an_existing_index_as_it_was)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from index.helpers import kiln_index, kiln_index_in_process, leftovers, tree
from index.synthetic_wheels import make_wheel

GOOD = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl"


def _garbage(dist: Path) -> None:
    (dist / GOOD).write_bytes(b"this is not a zip file at all\n" * 10)


def _truncated(dist: Path) -> None:
    wheel = make_wheel(dist)
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])


def _bad_crc(dist: Path) -> None:
    wheel = make_wheel(dist)
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("opkiln/_build_info.json")
    data = bytearray(wheel.read_bytes())
    # Flip a byte inside the member's compressed data (after its 30-byte local header and name).
    at = info.header_offset + 30 + len(info.filename) + 4
    data[at] ^= 0xFF
    wheel.write_bytes(bytes(data))


CASES: dict[str, tuple[Callable[[Path], object], str]] = {
    "non-wheel file": (lambda d: (d / "README.txt").write_text("hello"), "not a wheel"),
    "directory": (lambda d: (d / "subdir").mkdir(), "not a wheel file"),
    "unparsable name": (lambda d: make_wheel(d, filename="opkiln.whl"), "unparsable wheel name"),
    "name without tags": (lambda d: make_wheel(d, filename="opkiln-0.1.0.whl"), "unparsable wheel name"),
    "HTML characters": (lambda d: make_wheel(d, filename='opkiln-0.1.0-cp311-cp311-linux_x86_64"><b>.whl'),
                        "characters that do not belong"),
    "ampersand": (lambda d: make_wheel(d, filename="opkiln-0.1.0-cp311-cp311-linux&x86_64.whl"),
                  "characters that do not belong"),
    "path characters": (lambda d: make_wheel(d, filename="..\\..\\opkiln-0.1.0-cp311-cp311-linux_x86_64.whl"),
                        "characters that do not belong"),
    "backslash": (lambda d: make_wheel(d, filename="opkiln\\..\\x-0.1.0-cp311-cp311-linux_x86_64.whl"),
                  "characters that do not belong"),
    "space": (lambda d: make_wheel(d, filename="opkiln-0.1.0-cp311-cp311-linux x86_64.whl"),
              "characters that do not belong"),
    "corrupt zip": (_garbage, "corrupt wheel"),
    "truncated zip": (_truncated, "corrupt wheel"),
    "bad CRC": (_bad_crc, "corrupt wheel"),
    "no METADATA": (lambda d: make_wheel(d, metadata=False), "no opkiln-0.1.0+pt213cpu.dist-info/METADATA"),
    "no build info": (lambda d: make_wheel(d, build_info=False), "no opkiln/_build_info.json"),
    "METADATA of another version": (
        lambda d: make_wheel(d, filename="opkiln-0.2.0+pt213cpu-cp311-cp311-linux_x86_64.whl"),
        "a second .dist-info folder"),
    "invalid Requires-Python": (lambda d: make_wheel(d, requires_python='>=3.10"<x'), "Requires-Python"),
    "path in build info": (lambda d: make_wheel(d, build_info_overrides={"cuda_tag": "../../etc"}),
                           "invalid cuda_tag"),
    "build info for another python": (lambda d: make_wheel(d, build_info_overrides={"python_tag": "cp312"}),
                                      "python_tag 'cp312' is not the file name's"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_wheel_directory_is_refused_and_nothing_written(case: str, tmp_path: Path) -> None:
    make_bad, message = CASES[case]
    dist = tmp_path / "dist"
    dist.mkdir()
    make_wheel(dist, version="0.0.9+pt213cpu")  # a good wheel beside the bad one: still nothing is written
    make_bad(dist)
    out = tmp_path / "site"

    result = kiln_index_in_process(dist, out)

    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "nothing written" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_bad_input_leaves_an_existing_index_as_it_was(tmp_path: Path) -> None:
    from kiln_tool.index import build_index

    out = tmp_path / "site"
    build_index(make_wheel(tmp_path / "dist0").parent, out, audit=None)
    before = tree(out)
    dist = tmp_path / "dist"
    make_wheel(dist, version="0.2.0+pt213cpu")
    make_wheel(dist, version="0.3.0+pt213cpu", metadata=False)

    result = kiln_index(dist, out)

    assert result.returncode == 2
    assert "dist-info/METADATA" in result.stderr
    assert tree(out) == before
    assert leftovers(tmp_path) == []


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "notes.txt").write_text("x")
    make_wheel(dist, metadata=False)
    result = kiln_index_in_process(dist, tmp_path / "site")
    assert result.returncode == 2
    assert "2 unusable file(s)" in result.stderr
    assert "notes.txt" in result.stderr and "METADATA" in result.stderr


def test_hidden_partial_files_are_skipped(tmp_path: Path) -> None:
    """`kiln wheels` stages `.NAME.partial` in dist/ before its atomic rename: not input, not an error."""
    from kiln_tool.index import build_index

    dist = tmp_path / "dist"
    make_wheel(dist)
    (dist / f".{GOOD}.partial").write_bytes(b"half a wheel")
    result = build_index(dist, tmp_path / "site", audit=None)
    assert [w.filename for w in result.added] == [GOOD]


@pytest.mark.parametrize(("args", "message"), [
    (["--base-url", "javascript:alert(1)"], "not an http(s) URL"),
    (["--base-url", 'https://example.org/"><script>'], "must be a plain"),
    (["--base-url", "https://example.org/?q=1"], "must be a plain"),
])
def test_bad_base_url(args: list[str], message: str, tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    result = kiln_index_in_process(tmp_path / "dist", tmp_path / "site", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "site").exists()


def test_missing_dist_and_empty_dist(tmp_path: Path) -> None:
    result = kiln_index_in_process(tmp_path / "nope", tmp_path / "site")
    assert result.returncode == 2
    assert "no such directory" in result.stderr
    (tmp_path / "empty").mkdir()
    result = kiln_index_in_process(tmp_path / "empty", tmp_path / "site")
    assert result.returncode == 2
    assert "nothing to publish" in result.stderr
    assert not (tmp_path / "site").exists()


def test_output_that_is_not_an_index_is_refused(tmp_path: Path) -> None:
    make_wheel(tmp_path / "dist")
    foreign = tmp_path / "site"
    foreign.mkdir()
    (foreign / "index.html").write_text("<p>someone else's site</p>")
    result = kiln_index_in_process(tmp_path / "dist", foreign)
    assert result.returncode == 2
    assert "not an index written by kiln" in result.stderr
    assert tree(foreign) == {"index.html": tree(foreign)["index.html"]}

    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = kiln_index_in_process(tmp_path / "dist", a_file)
    assert result.returncode == 2
    assert "not a directory" in result.stderr


def test_damaged_index_is_refused(tmp_path: Path) -> None:
    from kiln_tool.index import build_index

    out = tmp_path / "site"
    build_index(make_wheel(tmp_path / "dist0").parent, out, audit=None)
    make_wheel(tmp_path / "dist", version="0.2.0+pt213cpu")

    (out / "wheels" / GOOD).unlink()
    result = kiln_index_in_process(tmp_path / "dist", out)
    assert result.returncode == 2
    assert "damaged index" in result.stderr

    shutil.rmtree(out)
    build_index(tmp_path / "dist0", out, audit=None)
    (out / "kiln-index.json").write_text("{not json")
    before = tree(out)
    result = kiln_index_in_process(tmp_path / "dist", out)
    assert result.returncode == 2
    assert "kiln-index.json" in result.stderr
    assert tree(out) == before

    manifest = {"schema": 1, "base_url": None, "wheels": [{"filename": "../../evil.whl"}]}
    (out / "kiln-index.json").write_text(json.dumps(manifest))
    result = kiln_index_in_process(tmp_path / "dist", out)
    assert result.returncode == 2
    assert "malformed entry" in result.stderr


def test_kiln_index_needs_no_torch(tmp_path: Path) -> None:
    """Maintainers run `kiln index` where torch is absent (the release job): it must not import it."""
    make_wheel(tmp_path / "dist", metadata=False)
    code = (
        "import sys; sys.path.insert(0, 'src'); "
        "import kiln_tool.cli as cli; "
        f"rc = cli.main(['index', {str(tmp_path / 'dist')!r}, {str(tmp_path / 'site')!r}]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; print('rc', rc)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert "rc 2" in result.stdout
