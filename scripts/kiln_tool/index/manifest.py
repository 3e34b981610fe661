"""The index's own record of what it has published: OUT/kiln-index.json.

Every run reads it, adds the new wheels and writes it back; pages are rendered
from it alone, so a merge never depends on parsing our own HTML. Entries are
only ever added: a published wheel keeps its name, bytes and combinations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .combos import Combination
from .errors import IndexInputError
from .wheels import CUDA_TAG, PYTHON_TAG, SAFE_WHEEL_NAME, TORCH_MAJOR_MINOR, WheelInfo

MANIFEST_NAME = "kiln-index.json"
MANIFEST_SCHEMA = 1
_HEX64 = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class PublishedWheel:
    filename: str
    project: str
    version: str
    sha256: str
    size: int
    metadata_sha256: str
    requires_python: str | None
    torch_requirement: str | None
    abi_mode: str
    cuda_tag: str
    torch_major_minor: str
    python_tag: str
    platforms: tuple[str, ...]
    combos: tuple[Combination, ...]

    @classmethod
    def from_wheel(cls, wheel: WheelInfo, combos: frozenset[Combination]) -> PublishedWheel:
        return cls(
            filename=wheel.filename, project=wheel.project, version=wheel.version, sha256=wheel.sha256,
            size=wheel.size, metadata_sha256=wheel.metadata_sha256, requires_python=wheel.requires_python,
            torch_requirement=wheel.torch_requirement, abi_mode=wheel.abi_mode, cuda_tag=wheel.cuda_tag,
            torch_major_minor=wheel.torch_major_minor, python_tag=wheel.python_tag, platforms=wheel.platforms,
            combos=tuple(sorted(combos, key=lambda c: c.sort_key)),
        )

    def with_combos(self, combos: frozenset[Combination]) -> PublishedWheel:
        if combos <= set(self.combos):
            return self
        merged = set(self.combos) | combos
        return replace(self, combos=tuple(sorted(merged, key=lambda c: c.sort_key)))

    def to_json(self) -> dict[str, Any]:
        return {
            "filename": self.filename, "project": self.project, "version": self.version, "sha256": self.sha256,
            "size": self.size, "metadata_sha256": self.metadata_sha256, "requires_python": self.requires_python,
            "torch_requirement": self.torch_requirement, "abi_mode": self.abi_mode, "cuda_tag": self.cuda_tag,
            "torch_major_minor": self.torch_major_minor, "python_tag": self.python_tag,
            "platforms": list(self.platforms), "combos": [{"torch": c.torch, "cuda": c.cuda} for c in self.combos],
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> PublishedWheel:
        if not isinstance(data, dict):
            raise IndexInputError(f"{where}: a wheel entry is not an object")
        try:
            filename = data["filename"]
            # The name becomes a path and a link: the same strict pattern as for new wheels.
            if not isinstance(filename, str) or not SAFE_WHEEL_NAME.fullmatch(filename):
                raise ValueError("bad filename")
            for key in ("sha256", "metadata_sha256"):
                value = data[key]
                if not (isinstance(value, str) and len(value) == 64 and set(value) <= _HEX64):
                    raise ValueError(f"bad {key}")
            if not isinstance(data["size"], int) or data["size"] < 0:
                raise ValueError("bad size")
            for key, pattern in (("cuda_tag", CUDA_TAG), ("torch_major_minor", TORCH_MAJOR_MINOR),
                                 ("python_tag", PYTHON_TAG)):
                if not pattern.fullmatch(data[key]):
                    raise ValueError(f"bad {key}")
            combos = []
            for combo in data["combos"]:
                if not (CUDA_TAG.fullmatch(combo["cuda"]) and TORCH_MAJOR_MINOR.fullmatch(combo["torch"])):
                    raise ValueError("bad combination")
                combos.append(Combination(combo["torch"], combo["cuda"]))
            return cls(
                filename=filename, project=str(data["project"]), version=str(data["version"]),
                sha256=data["sha256"], size=data["size"], metadata_sha256=data["metadata_sha256"],
                requires_python=data.get("requires_python"), torch_requirement=data.get("torch_requirement"),
                abi_mode=str(data["abi_mode"]), cuda_tag=data["cuda_tag"],
                torch_major_minor=data["torch_major_minor"], python_tag=data["python_tag"],
                platforms=tuple(str(p) for p in data["platforms"]), combos=tuple(combos),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IndexInputError(f"{where}: malformed entry for {data.get('filename')!r}: {exc}") from None


@dataclass
class Manifest:
    base_url: str | None
    wheels: dict[str, PublishedWheel]

    def to_json(self) -> str:
        """One wheel a line: readable, diffable, and fast to write (json's C encoder needs no indent)."""
        head = {"schema": MANIFEST_SCHEMA, "generator": "kiln index", "base_url": self.base_url}
        lines = [json.dumps(head, sort_keys=True)[:-1] + ', "wheels": [']
        entries = [json.dumps(self.wheels[name].to_json(), sort_keys=True) for name in sorted(self.wheels)]
        lines.append(",\n".join(entries))
        lines.append("]}")
        return "\n".join(lines) + "\n"


def load_manifest(out: Path) -> Manifest | None:
    """The manifest of an existing index at ``out``; None when ``out`` is absent or empty."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise IndexInputError(f"{out} exists and is not a directory")
    path = out / MANIFEST_NAME
    if not path.is_file():
        if any(out.iterdir()):
            raise IndexInputError(
                f"{out} is not empty and has no {MANIFEST_NAME}: not an index written by kiln; "
                "refusing to merge into it (choose an empty or new output directory)"
            )
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexInputError(f"{path}: unreadable ({exc}); refusing to merge") from None
    if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA or not isinstance(doc.get("wheels"), list):
        raise IndexInputError(f"{path}: not a kiln index manifest of schema {MANIFEST_SCHEMA}; refusing to merge")
    base_url = doc.get("base_url")
    if base_url is not None and not isinstance(base_url, str):
        raise IndexInputError(f"{path}: base_url is not a string")
    wheels: dict[str, PublishedWheel] = {}
    for entry in doc["wheels"]:
        wheel = PublishedWheel.from_json(entry, str(path))
        if wheel.filename in wheels:
            raise IndexInputError(f"{path}: {wheel.filename} listed twice")
        wheels[wheel.filename] = wheel
    return Manifest(base_url=base_url, wheels=wheels)
