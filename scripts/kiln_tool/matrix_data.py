"""Loader for data/matrix.json, the single source of truth for what opkiln builds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

MATRIX_FILE = Path(__file__).resolve().parents[2] / "data" / "matrix.json"


@dataclass(frozen=True, order=True)
class BuildSpec:
    """One wheel to build: exact torch, CUDA tag (cpu, cu126, cu130, ...) and Python."""

    torch: str
    cuda: str
    python: str

    @property
    def torch_major_minor(self) -> str:
        return ".".join(self.torch.split(".")[:2])

    @property
    def name(self) -> str:
        return f"torch{self.torch_major_minor}-{self.cuda}-py{self.python}"

    @property
    def variant_env(self) -> str:
        return "cpu" if self.cuda == "cpu" else "cuda"


@cache
def load_matrix(path: Path = MATRIX_FILE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def local_builds(path: Path = MATRIX_FILE) -> list[BuildSpec]:
    return [BuildSpec(**entry) for entry in load_matrix(path)["local"]]
