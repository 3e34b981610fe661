"""The --json document follows its schema (scripts/kiln_tool/audit/report.schema.json)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from audit_corpus import PY_SUFFIX, REPO, Corpus, make_wheel, run_kiln

from kiln_tool.audit import CHECK_IDS

SCHEMA = json.loads((REPO / "scripts" / "kiln_tool" / "audit" / "report.schema.json").read_text())


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
