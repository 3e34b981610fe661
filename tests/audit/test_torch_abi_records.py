"""kiln_tool.torch_abi_records: the torches built wheels need recorded, fetched and recorded (what `kiln torch-abi
--for-wheels` and `kiln release` share), and kiln_tool.audit.release_rule."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from audit_corpus import Corpus, fake_torch_wheel

from index.synthetic_wheels import make_wheel
from kiln_tool import torch_abi_records
from kiln_tool.audit import target as target_module
from kiln_tool.audit.release_rule import STANDIN_ENV, release_rule
from kiln_tool.audit.torch_abi import DATA_DIR_ENV, load_recorded, record_wheel, recorded_versions
from kiln_tool.matrix_data import load_matrix


def _built(folder: Path, torch_version: str | None, tag: str) -> Path:
    if torch_version is None:
        return make_wheel(folder, name="ringops", python_tag=tag, build_info=False)
    return make_wheel(folder, name="ringops", python_tag=tag, build_info_overrides={"torch_version": torch_version})


@pytest.fixture
def sites(corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A record folder holding 9.1.0+cpu, and one installed torch, 9.4.0+cpu (its torch/lib and version.py)."""
    records = tmp_path / "records"
    torch_abi_records.record_torch_wheel(
        fake_torch_wheel(tmp_path / "t91", "9.1.0+cpu", {"libc10.so": corpus["libplain.so"].read_bytes()}),
        (), records, say=lambda _line: None)
    installed = tmp_path / "site" / "torch"
    (installed / "lib").mkdir(parents=True)
    (installed / "version.py").write_text("__version__ = '9.4.0+cpu'\n")
    monkeypatch.setenv(DATA_DIR_ENV, str(records))
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [installed / "lib"])
    return {"records": records, "lib": corpus["libplain.so"]}


def test_needed_torches_are_those_neither_recorded_nor_installed_in_first_named_order(
        sites: dict[str, Path], tmp_path: Path) -> None:
    wheels = [_built(tmp_path / "w", v, f"cp3{i}") for i, v in enumerate(
        ["9.3.0+cu130", "9.1.0+cpu", "9.2.0+cpu", None, "9.4.0+cpu", "9.3.0+cu130", "9.2.0+cpu"])]
    assert torch_abi_records.needed_torches(wheels) == ["9.3.0+cu130", "9.2.0+cpu"]
    assert torch_abi_records.needed_torches(wheels[1:2] + wheels[3:5]) == []


def test_record_needed_torches_downloads_and_records_each_once(
        sites: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def download(version: str, into: Path) -> Path:
        asked.append(version)
        made = fake_torch_wheel(tmp_path / "pypi" / version, version, {"libc10.so": sites["lib"].read_bytes()})
        return Path(shutil.copy2(made, into))

    monkeypatch.setattr(torch_abi_records, "download_torch", download)
    wheels = [_built(tmp_path / "w", v, f"cp3{i}") for i, v in enumerate(["9.2.0+cpu", "9.1.0+cpu", "9.2.0+cpu",
                                                                          "9.5.0+cu130"])]
    said: list[str] = []
    out = sites["records"]
    n = record_wheel(fake_torch_wheel(tmp_path / "n", "0+cpu", {"libc10.so": sites["lib"].read_bytes()})
                     )["libraries"]["torch/lib/libc10.so"]["count"]
    assert torch_abi_records.record_needed_torches(wheels, out, say=said.append) == ["9.2.0+cpu", "9.5.0+cu130"]
    assert asked == ["9.2.0+cpu", "9.5.0+cu130"]
    assert [line.split(": ", 1)[1] for line in said] == [f"torch {v}; libc10.so {n}" for v in asked]
    assert [line.startswith(f"wrote {out / v}.json (") for v, line in zip(asked, said, strict=True)] == [True, True]
    # in the same process (kiln release audits right after recording): the new records are seen
    assert set(recorded_versions()) == {"9.1.0+cpu", "9.2.0+cpu", "9.5.0+cu130"}
    loaded = load_recorded("9.5.0+cu130")
    assert loaded is not None and set(loaded.libraries) == {"torch/lib/libc10.so"}
    assert torch_abi_records.record_needed_torches(wheels, out, say=said.append) == []
    assert asked == ["9.2.0+cpu", "9.5.0+cu130"]


def test_the_release_rule_is_the_matrix_floor_or_the_standin_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    floor = str(load_matrix()["manylinux_floor"])
    said: list[str] = []
    monkeypatch.delenv(STANDIN_ENV, raising=False)
    rule = release_rule(said.append)
    assert f"manylinux_{rule.floor[0]}_{rule.floor[1]}" == floor and rule.standin_tag is None and said == []
    monkeypatch.setenv(STANDIN_ENV, " manylinux_2_34 ")
    rule = release_rule(said.append)
    assert rule.standin_tag == "manylinux_2_34" and rule.floor[0] == int(floor.split("_")[1])
    assert said == [f"kiln audit: STAND-IN run ({STANDIN_ENV}=manylinux_2_34): wheels must carry that tag; none of "
                    f"them is a release wheel (the release floor is {floor})"]
    for bad in ("2_34", "manylinux2014", "manylinux_2_34_x86_64"):
        monkeypatch.setenv(STANDIN_ENV, bad)
        with pytest.raises(ValueError, match=f"{STANDIN_ENV}='{bad}' is not like manylinux_2_34"):
            release_rule(said.append)
