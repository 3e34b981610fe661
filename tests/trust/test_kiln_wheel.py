"""Round 2: the gates accept only what kiln makes.

Each class of the issue, as generated or fixed cases, through `kiln index`, `kiln audit` and `kiln repair`:
ambiguous archives (every byte must belong to a central entry whose local header agrees), wheels a
release must never carry (the positive kiln-wheel definition: an allowlist of members, one build info,
every field cross-checked), and the distinction from foreign wheels, which the audit keeps judging.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.synthetic_wheels import make_wheel
from trust.hostile_zips import add_members, append, hide_from_central, member, prepend, rename_local, unicode_path_extra
from trust.kiln_runs import assert_kept_promises, kiln, outside, tree

PROFILE = settings(max_examples=12, derandomize=True, database=None, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NEW = "0.2.0+pt213cpu"
DIST_INFO = f"opkiln-{NEW}.dist-info"


def _refused_everywhere(site: Path, wheel: Path, rule: str, *, repair: bool = True, audit_rule: str | None = None
                        ) -> None:
    """kiln index, kiln audit and kiln repair all refuse the wheel: exit 2, the rule named, nothing changed.

    A wheel of another project is foreign to the audit and to repair (``audit_rule=""``, ``repair=False``:
    judged by its checks, repaired as it is); the index refuses it as not the site's project."""
    root = site.parent
    before_site, before_outside = tree(site), outside(root, site)
    run = kiln("index", wheel.parent, site)
    assert_kept_promises(run, root, site, before_outside, before_site)
    assert run.code == 2, run.stdout + run.stderr
    assert rule in run.stderr, run.stderr
    audit = kiln("audit", wheel)
    assert "Traceback" not in audit.stderr and audit.code in (0, 1, 2), audit.stdout + audit.stderr
    if audit_rule != "":
        assert audit.code == 2, audit.stdout + audit.stderr
        assert (audit_rule or rule) in audit.stdout + audit.stderr
    if repair:
        out = root / "repaired"
        fixed = kiln("repair", wheel, "-w", out)
        assert fixed.code == 2 and rule in fixed.stderr, fixed.stderr
        assert not out.exists() or not any(out.iterdir())


# -- canonical archives ------------------------------------------------------------------------------------

def _second_archive() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("opkiln/__init__.py", b"import os; os.system('evil')\n")
    return buf.getvalue()


AMBIGUOUS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "a second archive prepended": (lambda w: prepend(w, _second_archive()), "accounts for"),
    "junk before the first header": (lambda w: prepend(w, b"PK\x03\x04" + bytes(100)), "accounts for"),
    "trailing data after the end record": (lambda w: append(w, b"\0" * 7), "end-of-archive record"),
    "a second end record appended": (lambda w: append(w, w.read_bytes()[-22:]), "central directory"),
    "a local entry missing from the central directory": (
        lambda w: hide_from_central(add_members(w, [(member("opkiln/hidden.py"), b"evil")]), "opkiln/hidden.py"),
        "accounts for"),
    "local and central names disagree": (
        lambda w: rename_local(w, "opkiln/__init__.py", "opkiln/__init__.pz"), "local header names it"),
    "names colliding by case": (
        lambda w: add_members(w, [(member("opkiln/__INIT__.py"), b"x")]), "differ only by case"),
    "a control character in a name": (
        lambda w: add_members(w, [(member("opkiln/a\x1b[2J.py"), b"x")]), "control or invisible"),
    "a right-to-left override in a name": (
        lambda w: add_members(w, [(member("opkiln/\u202eyp.exe"), b"x")]), "control or invisible"),
    "an Info-ZIP Unicode path (a second name)": (
        lambda w: add_members(w, [(unicode_path_extra("opkiln/a.py", "opkiln/b.py"), b"x")]), "second"),
}


@pytest.mark.parametrize("case", sorted(AMBIGUOUS))
def test_an_ambiguous_archive_is_refused_by_every_gate(case: str, site: Path, tmp_path: Path) -> None:
    make, rule = AMBIGUOUS[case]
    wheel = make(next((tmp_path / "dist").glob("*.whl")))
    _refused_everywhere(site, wheel, rule)


@pytest.mark.parametrize("case", ["a second archive prepended", "trailing data after the end record",
                                  "a local entry missing from the central directory", "a control character in a name"])
def test_a_foreign_wheel_is_held_to_the_archive_rules_too(case: str, tmp_path: Path) -> None:
    """The archive rules are kiln_tool.safezip's: they hold for every wheel the audit opens, kiln's or not."""
    make, rule = AMBIGUOUS[case]
    wheel = make(make_wheel(tmp_path / "foreign", name="kilntest", version="0.1.0"))
    audit = kiln("audit", wheel)
    assert audit.code == 2 and rule in audit.stdout + audit.stderr, audit.stdout + audit.stderr


def test_a_foreign_wheel_is_not_judged_by_the_kiln_definition(tmp_path: Path) -> None:
    """A third-party wheel (another project, no build info, a console script) is the audit's to judge: no input
    error for what only kiln's own wheels must not have."""
    wheel = make_wheel(tmp_path / "foreign", name="kilntest", version="0.1.0", build_info=False,
                       extra_files={"kilntest-0.1.0.dist-info/entry_points.txt": b"[console_scripts]\nx = y:z\n"})
    audit = kiln("audit", wheel)
    assert audit.code in (0, 1), audit.stdout + audit.stderr
    assert "not a kiln wheel" not in audit.stdout + audit.stderr


@PROFILE
@given(junk=st.binary(min_size=1, max_size=300), where=st.sampled_from(["before", "after"]))
def test_any_bytes_outside_the_archive_are_refused(tmp_path_factory: pytest.TempPathFactory, junk: bytes,
                                                   where: str) -> None:
    from kiln_tool.safezip import SafeZip, UnsafeArchiveError

    wheel = make_wheel(tmp_path_factory.mktemp("junk"), version=NEW)
    data = wheel.read_bytes()
    with pytest.raises(UnsafeArchiveError):
        SafeZip(junk + data if where == "before" else data + junk)


def test_every_kiln_shape_of_archive_is_accepted(tmp_path: Path) -> None:
    """zipfile's own output (stored and deflated, data descriptors from a streamed writer) is canonical."""
    from kiln_tool.safezip import SafeZip

    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=method) as zf:
            zf.writestr("a/b.py", b"x" * 1000)
            with zf.open("a/c.py", "w") as fh:  # streamed: sizes in a data descriptor
                fh.write(b"y" * 5000)
        with SafeZip(buf.getvalue()) as archive:
            assert sorted(archive.verify(frozenset({"a/c.py"}))) == ["a/c.py"]


# -- the positive definition of a kiln wheel ---------------------------------------------------------------

NEVER: dict[str, tuple[dict[str, object], str]] = {
    "another project": (dict(name="torch"), "project"),
    "a trailing separator in the project": (dict(name="opkiln_"), "project"),
    "a second .dist-info naming another project": (
        dict(extra_files={"pip-99.0.dist-info/METADATA": b"Name: pip\nVersion: 99.0\n\n"}), "second .dist-info"),
    "a top-level .pth": (dict(extra_files={"evil.pth": b"import os\n"}), ".pth"),
    ".data/scripts (a pip over the environment's)": (
        dict(extra_files={f"opkiln-{NEW}.data/scripts/pip": b"#!python\n"}), ".data"),
    ".data/data": (dict(extra_files={f"opkiln-{NEW}.data/data/etc/x": b"x"}), ".data"),
    ".data/headers": (dict(extra_files={f"opkiln-{NEW}.data/headers/x.h": b"x"}), ".data"),
    "sitecustomize": (dict(extra_files={"sitecustomize.py": b"import os\n"}), "interpreter start"),
    "a top-level module": (dict(extra_files={"pip/__init__.py": b""}), "lies outside"),
    "console scripts": (dict(extra_files={f"{DIST_INFO}/entry_points.txt": b"[console_scripts]\npip = x:y\n"}),
                        "entry points"),
    "Root-Is-Purelib: true": (dict(wheel_lines=["Wheel-Version: 1.0", "Root-Is-Purelib: true",
                                                "Tag: cp311-cp311-linux_x86_64"]), "Root-Is-Purelib"),
    "Wheel-Version 2.0 (installers refuse it)": (dict(wheel_lines=["Wheel-Version: 2.0", "Root-Is-Purelib: false",
                                                                   "Tag: cp311-cp311-linux_x86_64"]), "Wheel-Version"),
    "WHEEL tags that are not the name's": (dict(wheel_lines=["Wheel-Version: 1.0", "Root-Is-Purelib: false",
                                                             "Tag: py3-none-any"]), "Tag lines"),
    "a direct-URL dependency": (dict(metadata_lines=["Requires-Dist: evil @ https://evil.example/evil.whl"]),
                                "direct URL"),
    "Requires-Python with ===": (dict(requires_python="===3.11;x"), "Requires-Python"),
    "a very long Requires-Python": (dict(requires_python=">=3.10," + ",".join(["!=3.9.1"] * 40)), "Requires-Python"),
    "a platform tag with +": (dict(platform="linux+x86_64"), "platform tag"),
    "a Windows platform tag": (dict(platform="win_amd64"), "platform tag"),
    "a very long version": (dict(version="0." + "1." * 40 + "0+pt213cpu"), "version"),
    "a member name installers refuse": (dict(extra_files={"opkiln/a b.py": b""}), "name part"),
    "a second build info elsewhere": (dict(extra_files={"opkiln/sub/_build_info.json": b"{}"}), "build info"),
    "build info for another torch minor": (dict(build_info_overrides={"torch_major_minor": "2.14",
                                                                     "torch_version": "2.14.0"}), "torch"),
    "build info for another variant": (dict(build_info_overrides={"cuda_tag": "cu130", "cuda": "13.0"}),
                                       "local label"),
    "a torch pin of another minor": (dict(torch_requirement="torch<2.15,>=2.14"), "torch requirement"),
    "no torch pin": (dict(torch_requirement=None), "torch requirement"),
    "build info of another version": (dict(build_info_overrides={"version": "0.3.0+pt213cpu"}),
                                      "version"),
    "a stable-ABI build info on a per-torch name": (dict(build_info_overrides={"abi_mode": "stable"}), "stable"),
    "CUDA kernels built against another CUDA's torch": (
        dict(version="0.2.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14",
             torch_requirement="torch<2.15,>=2.14", build_info_overrides={"torch_version": "2.14.1+cu126"}), "torch"),
}


@pytest.mark.parametrize("case", sorted(NEVER))
def test_a_wheel_a_release_must_never_carry_is_refused(case: str, site: Path, tmp_path: Path) -> None:
    knobs, rule = NEVER[case]
    dist = tmp_path / "dist"
    for old in dist.glob("*.whl"):
        old.unlink()
    wheel = make_wheel(dist, **{"version": NEW, **knobs})
    # Another project's wheel is foreign to the audit and to repair (repaired as it is, with kiln's excludes
    # and floor); the index, which publishes the configured project only, refuses it.
    foreign = rule == "project"
    _refused_everywhere(site, wheel, rule, audit_rule="" if foreign else None, repair=not foreign)


def test_a_build_tag_is_refused(site: Path, tmp_path: Path) -> None:
    """A rebuilt wheel under another spelling would replace what pages list (pip prefers the build tag)."""
    dist = tmp_path / "dist"
    for old in dist.glob("*.whl"):
        old.unlink()
    wheel = make_wheel(dist, version=NEW, filename=f"opkiln-{NEW}-1-cp311-cp311-linux_x86_64.whl")
    _refused_everywhere(site, wheel, "build tag")


REAL_SHAPES = [
    dict(),
    dict(version="0.2.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14", torch_requirement="torch<2.15,>=2.14",
         platform="manylinux_2_34_x86_64"),
    dict(version="0.2.0+cpu", abi_mode="stable", python_tag="cp310", torch_requirement="torch>=2.13",
         platform="manylinux_2_28_x86_64"),
    dict(platform="manylinux_2_28_aarch64"),
    # CPU kernels against a CUDA build of the torch minor (KILN_VARIANT=cpu; PyPI's aarch64 torch is one).
    dict(platform="manylinux_2_34_aarch64", build_info_overrides={"torch_version": "2.13.0+cu130"}),
    dict(platform="manylinux_2_27_x86_64.manylinux_2_28_x86_64"),
    dict(extra_files={"opkiln.libs/libgomp-a34b3233.so.1.0.0": b"\x7fELF",
                      f"{DIST_INFO}/sboms/auditwheel.cdx.json": b"{}", f"{DIST_INFO}/licenses/LICENSE": b"BSD"}),
]


@pytest.mark.parametrize("knobs", REAL_SHAPES, ids=["cpu", "cu130", "abi3", "aarch64", "cpu kernels, cuda torch",
                                                    "compressed tags", "repaired (libs, sboms, licenses)"])
def test_every_shape_kiln_builds_fits_the_definition(knobs: dict[str, object], tmp_path: Path) -> None:
    from kiln_tool import kiln_wheel
    from kiln_tool.safezip import SafeZip

    wheel = make_wheel(tmp_path, **{"version": NEW, **knobs})
    with SafeZip(wheel) as archive:
        kiln_wheel.check_archive(kiln_wheel.check_name(wheel.name), archive)


def test_real_kiln_wheels_fit_the_definition(cpu_wheel: Path) -> None:
    """The wheel kiln builds (dist/'s repaired one, else scikit-build-core's output built for the session)."""
    from kiln_tool import kiln_wheel
    from kiln_tool.safezip import SafeZip

    for wheel in {cpu_wheel}:
        with SafeZip(wheel) as archive:
            found = kiln_wheel.check_archive(kiln_wheel.check_name(wheel.name), archive)
        assert found.torch_major_minor == "2.13" and found.cuda_tag == "cpu"


# -- a malformed ELF never reaches the catch-all handler ---------------------------------------------------

SMALL_ELF = next((p for p in (Path("/lib/x86_64-linux-gnu/libutil.so.1"), Path("/lib/x86_64-linux-gnu/libdl.so.2"))
                  if p.is_file()), None)


@settings(max_examples=30, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.none() | st.integers(16, 8192))
def test_a_malformed_elf_is_a_clear_refusal(tmp_path_factory: pytest.TempPathFactory,
                                            edits: list[tuple[int, int]], cut: int | None) -> None:
    if SMALL_ELF is None:
        pytest.skip("no small system ELF library to mutate")
    data = bytearray(SMALL_ELF.read_bytes())
    for at, value in edits:
        if at < len(data):
            data[at] = value
    root = tmp_path_factory.mktemp("elf")
    make_wheel(root / "dist0")
    assert kiln("index", root / "dist0", root / "site").code == 0
    wheel = make_wheel(root / "dist", version=NEW,
                       extra_files={"opkiln/_C.cpython-311-x86_64-linux-gnu.so": bytes(data[:cut])})
    before_site, before_outside = tree(root / "site"), outside(root, root / "site")
    run = kiln("index", wheel.parent, root / "site")
    assert_kept_promises(run, root, root / "site", before_outside, before_site)
    audit = kiln("audit", wheel)
    assert audit.code in (0, 1, 2) and "Traceback" not in audit.stderr
    # Judged (the elf-valid check), never the last-resort handler's "cannot use this input".
    assert "cannot use this input" not in audit.stderr, audit.stderr
