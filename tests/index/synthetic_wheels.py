"""Wheels made on the spot: tiny synthetic ones (bad-input cases, the 10,000-wheel benchmark)
and re-versioned copies of a real wheel (a second real release to merge).

Shared by tests/index/ and benchmarks/bench_index.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zipfile
from pathlib import Path

_DATE = (2026, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write_zip(path: Path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)


def _with_record(files: dict[str, bytes], dist_info: str) -> dict[str, bytes]:
    record = f"{dist_info}/RECORD"
    lines = [f"{name},{_record_hash(data)},{len(data)}" for name, data in files.items()
             if name != record and not name.endswith("/")]  # directory entries (auditwheel writes them) are not files
    lines.append(f"{record},,")
    return {**{k: v for k, v in files.items() if k != record}, record: ("\n".join(lines) + "\n").encode()}


def metadata_text(name: str, version: str, requires_python: str | None = ">=3.10",
                  torch_requirement: str | None = "torch<2.14,>=2.13") -> str:
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", "Summary: synthetic test wheel"]
    if requires_python:
        lines.append(f"Requires-Python: {requires_python}")
    if torch_requirement:
        lines.append(f"Requires-Dist: {torch_requirement}")
    return "\n".join(lines) + "\n\n"


def make_wheel(directory: Path, *, name: str = "opkiln", version: str = "0.1.0+pt213cpu",
               python_tag: str = "cp311", abi_tag: str | None = None, platform: str = "linux_x86_64",
               abi_mode: str = "torch", cuda_tag: str = "cpu", torch_major_minor: str = "2.13",
               requires_python: str | None = ">=3.10", torch_requirement: str | None = "torch<2.14,>=2.13",
               filename: str | None = None, metadata: bool = True, build_info: bool = True,
               build_info_overrides: dict[str, object] | None = None, extra_files: dict[str, bytes] | None = None,
               metadata_lines: list[str] | None = None, wheel_lines: list[str] | None = None) -> Path:
    """A small but well-formed wheel (METADATA, WHEEL, RECORD, build info); knobs to break each part.

    ``extra_files`` are added (and listed in RECORD); ``metadata_lines`` are appended to METADATA's
    headers; ``wheel_lines`` replace WHEEL's lines."""
    directory.mkdir(parents=True, exist_ok=True)
    abi = abi_tag or ("abi3" if abi_mode == "stable" else python_tag)
    dist = f"{name}-{version}"
    filename = filename or f"{dist}-{python_tag}-{abi}-{platform}.whl"
    module = re.sub(r"[-_.]+", "_", name).lower()
    info = {
        "schema": 1, "project": re.sub(r"[-_.]+", "-", name).lower(), "package": module,
        "version": version, "abi_mode": abi_mode, "torch_version": f"{torch_major_minor}.0",
        "torch_major_minor": torch_major_minor,
        "cuda": None if cuda_tag == "cpu" else f"{cuda_tag[2:-1]}.{cuda_tag[-1]}",
        "cuda_tag": cuda_tag, "python_tag": python_tag if abi != "abi3" else f"{python_tag}-abi3",
        **({"torch_min": torch_major_minor} if abi_mode == "stable" else {}),
        **(build_info_overrides or {}),
    }
    files: dict[str, bytes] = {f"{module}/__init__.py": b"__version__ = '0'\n"}
    if build_info:
        files[f"{module}/_build_info.json"] = (json.dumps(info, indent=2, sort_keys=True) + "\n").encode()
    files.update(extra_files or {})
    if metadata:
        text = metadata_text(name, version, requires_python, torch_requirement)
        if metadata_lines:
            text = text.rstrip("\n") + "\n" + "\n".join(metadata_lines) + "\n\n"
        files[f"{dist}.dist-info/METADATA"] = text.encode()
    lines = wheel_lines if wheel_lines is not None else [
        "Wheel-Version: 1.0", "Generator: synthetic", "Root-Is-Purelib: false",
        *(f"Tag: {python_tag}-{abi}-{p}" for p in platform.split("."))]
    files[f"{dist}.dist-info/WHEEL"] = ("\n".join(lines) + "\n").encode()
    path = directory / filename
    _write_zip(path, _with_record(files, f"{dist}.dist-info"))
    return path


def reversion(wheel: Path, directory: Path, new_version: str) -> Path:
    """A copy of a real wheel as another version (dist-info, METADATA, build info, RECORD all updated).

    The compiled extension is untouched, so the audit sees the same ELF as in the original.
    """
    name, old_version, rest = wheel.name.split("-", 2)
    old_dist, new_dist = f"{name}-{old_version}", f"{name}-{new_version}"
    files: dict[str, bytes] = {}
    infos: dict[str, zipfile.ZipInfo] = {}
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            member = info.filename
            if member.startswith(f"{old_dist}.dist-info/"):
                member = new_dist + member[len(old_dist):]
            if member.endswith(".dist-info/METADATA"):
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {new_version}".encode(), data, count=1)
            elif member.endswith("/_build_info.json"):
                doc = json.loads(data)
                doc["version"] = new_version
                data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
            files[member] = data
            infos[member] = info
    files = _with_record(files, f"{new_dist}.dist-info")
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{new_dist}-{rest}"
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member, data in files.items():
            source = infos.get(member)
            info = zipfile.ZipInfo(member, date_time=source.date_time if source else _DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = source.external_attr if source else 0o644 << 16
            zf.writestr(info, data)
    return out


def rezip(wheel: Path, directory: Path) -> Path:
    """The same wheel, same name, same contents, other bytes (a rebuilt wheel that is not bit-identical)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED,
                                                        compresslevel=1) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
        dst.comment = b"rebuilt"
    return out


def tamper(wheel: Path, directory: Path, member: str = "opkiln/__init__.py") -> Path:
    """The same wheel with one member edited after the fact: its RECORD no longer matches."""
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == member:
                data += b"\nimport os  # planted\n"
            dst.writestr(info, data)
    return out
