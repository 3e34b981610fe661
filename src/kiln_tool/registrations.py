"""The ops a backend-built wheel's libraries register, as torch's dispatcher sees them once they are loaded.

``kiln wheels`` runs this file's source (``python -c <source> LIBRARY...``) with the build venv's Python on
the libraries it just built: whatever API registered them (``TORCH_LIBRARY``/``m.def``,
``torch::RegisterOperators().op(...)``, a schema string built at run time), the dispatcher holds them after
the load, so the op manifest the guard proves is the libraries' own, not a reading of their sources.
It prints one JSON document: ``{"ops": [...qualified names the load added, overloads folded...]}``, or
``{"error": "<library>: <first line of the loader's error>"}`` with exit status 1.

Standard library and torch only, no import of kiln_tool: it runs as a script in the build's Python.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable


def _op_names() -> set[str]:
    import torch

    if hasattr(torch._C, "_dispatch_get_all_op_names"):
        return set(torch._C._dispatch_get_all_op_names())
    return {s.name for s in torch._C._jit_get_all_schemas()}


def fold(names: Iterable[str]) -> list[str]:
    """``ns::op.overload`` -> ``ns::op``; sorted, unique."""
    return sorted({name.split(".", 1)[0] for name in names if "::" in name})


def main(argv: list[str] | None = None) -> int:
    libraries = sys.argv[1:] if argv is None else argv
    import torch

    before = _op_names()
    for library in libraries:
        try:
            torch.ops.load_library(library)  # type: ignore[no-untyped-call]
        except (OSError, RuntimeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            print(json.dumps({"error": f"{library}: {first}"}))
            return 1
    print(json.dumps({"ops": fold(_op_names() - before)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
