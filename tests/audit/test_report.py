"""The --json document follows its schema (src/kiln_tool/audit/report.schema.json)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from audit_corpus import PY_SUFFIX, REPO, Corpus, make_wheel, run_kiln

from kiln_tool.audit import CHECK_IDS

SCHEMA = json.loads((REPO / "src" / "kiln_tool" / "audit" / "report.schema.json").read_text())


def test_json_documents_follow_the_schema(corpus: Corpus, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, {f"kilntest/clean{PY_SUFFIX}": corpus[f"clean{PY_SUFFIX}"].read_bytes(),
                                  "kilntest/libcombo.so": corpus["libcombo.so"].read_bytes()})
    result = run_kiln("audit", "--json", str(wheel), str(corpus["libplain.so"]))
    assert result.returncode == 1
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["ok"] is False
    assert [a["kind"] for a in document["artifacts"]] == ["wheel", "library"]
    assert document["artifacts"][1]["ok"] is True

    error = run_kiln("audit", "--json", str(tmp_path / "missing.whl"))
    jsonschema.validate(json.loads(error.stdout), SCHEMA)


def test_schema_names_every_check_id() -> None:
    assert SCHEMA["$defs"]["check_id"]["enum"] == list(CHECK_IDS)


def test_warnings_do_not_fail_and_json_keeps_both(corpus: Corpus, tmp_path: Path) -> None:
    # libneedsdep.so reaches sub/libdep.so only by preload (a warning); nothing else is wrong with it. libdep.so
    # exports kiln_dep, which its sibling libneedsdep.so imports: not a leak. The leaky module's exports are.
    files = {"kilntest/libneedsdep.so": corpus["libneedsdep.so"].read_bytes(),
             "kilntest/sub/libdep.so": corpus["sub/libdep.so"].read_bytes(),
             f"kilntest/leaky{PY_SUFFIX}": corpus[f"leaky{PY_SUFFIX}"].read_bytes()}
    wheel = make_wheel(tmp_path, files)
    result = run_kiln("audit", "--json", "--gpu", "sm_90", str(wheel))
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    severities = {(c["id"], c["finding"], c["severity"]) for a in document["artifacts"] for lib in a["libraries"]
                  for c in lib["checks"] if not c["ok"]}
    assert ("undefined-symbols", "preload", "warning") in severities
    exports = {lib["path"]: c for a in document["artifacts"] for lib in a["libraries"] for c in lib["checks"]
               if c["id"] == "exports"}
    leaky = exports[f"kilntest/leaky{PY_SUFFIX}"]
    assert leaky["severity"] == "error" and not leaky["ok"]
    assert exports["kilntest/sub/libdep.so"]["ok"], exports["kilntest/sub/libdep.so"]
    assert document["warnings"] >= 1 and document["errors"] >= 1 and result.returncode == 1
    # Only warnings (the floor is unknown: the torch it requires is neither installed nor recorded): exit 0, ok,
    # and the warning is kept.
    (quiet := tmp_path / "quiet").mkdir()
    clean = make_wheel(quiet, {f"kilntest/clean{PY_SUFFIX}": corpus[f"clean{PY_SUFFIX}"].read_bytes()},
                       requires=("torch==9.9.0",))
    result = run_kiln("audit", "--json", str(clean))
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    assert result.returncode == 0 and document["ok"] is True and document["errors"] == 0
    assert document["warnings"] == 1
    (check,) = [c for c in document["artifacts"][0]["checks"] if not c["ok"]]
    assert (check["id"], check["finding"], check["severity"]) == ("wheel-tag", "floor-unknown", "warning")
