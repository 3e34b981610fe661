"""kiln-index.json read back field by field, in this process (kiln_tool.index.manifest): the base URL rules
at their boundaries, the one-line schema messages, the canonical form of the file, entries of wheels that live
in storage (url, stored_at, metadata_beside), and the manifest file itself refused when it is not a regular
file. The command-line cases (tests/index/test_bad_input.py) show the same refusals end to end; these pin down
each rule so that a change of it fails a test (`make mutation`, docs/mutation.md)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from index.synthetic_wheels import make_wheel
from kiln_tool.index import build_index
from kiln_tool.index.combos import Combination
from kiln_tool.index.errors import IndexInputError
from kiln_tool.index.manifest import (
    MANIFEST_NAME,
    MAX_BASE_URL,
    Manifest,
    PublishedWheel,
    check_base_url,
    load_manifest,
    parse_manifest,
    schema_problem,
)
from kiln_tool.index.wheels import check_wheel_name, file_sha256, inspect_wheel

TORCH = "opkiln-0.1.0+pt213cpu-cp311-cp311-linux_x86_64.whl"
STORED = "https://github.com/opkiln/opkiln/releases/download/v0.1.0/"

# ---------------------------------------------------------------------------------------------------------
# --base-url, as given and as read back


ACCEPTED = ["http://x/", "https://example.org/opkiln/", "https://127.0.0.1:8080/a/b/", "https://[::1]:1/",
            "https://h.example/~user/a-b_c.d/(x)/%20/"]

REFUSED = {
    "ftp://x/": "not an http(s) URL with a host",
    "file:///etc/": "not an http(s) URL with a host",
    "http:///x/": "not an http(s) URL with a host",
    "https://x:99999/": "not a URL",
    "https://[::1/": "not a URL",
    "https://u:p@x/": "carries credentials",
    "https://x/a": "must be a plain http(s) URL ending in '/'",
    "https://x/a b/": "must be a plain",
    "https://x/?q=1/": "must be a plain",
    "https://x/#top/": "must be a plain",
    'https://x/"><script>/': "must be a plain",
    "https://x/é/": "must be a plain",
}


@pytest.mark.parametrize("url", ACCEPTED)
def test_a_plain_base_url_is_kept_as_given(url: str) -> None:
    assert check_base_url(url) == url


@pytest.mark.parametrize("url", sorted(REFUSED))
def test_each_base_url_rule_refuses_with_its_own_reason(url: str) -> None:
    with pytest.raises(IndexInputError) as caught:
        check_base_url(url)
    message = str(caught.value)
    assert message.startswith(f"--base-url {url!r}: "), message
    assert REFUSED[url] in message


def test_the_base_url_length_limit_is_inclusive() -> None:
    at_limit = "https://example.org/" + "a" * (MAX_BASE_URL - len("https://example.org/") - 1) + "/"
    assert len(at_limit) == MAX_BASE_URL
    assert check_base_url(at_limit) == at_limit
    with pytest.raises(IndexInputError, match=f"longer than {MAX_BASE_URL} characters"):
        check_base_url(at_limit[:-1] + "a/")


@given(st.text(alphabet="abc/ ?", min_size=120, max_size=300))
def test_a_refused_base_url_is_shown_cut_to_100_characters(tail: str) -> None:
    url = "https://x/" + tail + " /"  # the space makes every one of them a refusal
    with pytest.raises(IndexInputError) as caught:
        check_base_url(url)
    assert repr(url[:100]) in str(caught.value)
    assert repr(url[:101]) not in str(caught.value)


# ---------------------------------------------------------------------------------------------------------
# The schema's verdict, in one line


def _doc(**top: Any) -> dict[str, Any]:
    return {"schema": 1, "base_url": None, "wheels": [], **top}


def test_a_document_level_problem_names_the_field_alone() -> None:
    assert schema_problem(_doc()) is None
    assert schema_problem(_doc(generator="kiln index")) is None
    assert schema_problem(_doc(generator=5)) == "data.generator must be same as const definition: kiln index"


def test_an_entry_problem_names_the_entry_by_its_file_name() -> None:
    problem = schema_problem(_doc(wheels=[{"filename": "a.whl", "size": 1}]))
    assert problem is not None
    assert problem.startswith("malformed entry for 'a.whl': data.wheels[0] must contain ["), problem
    assert schema_problem(_doc(wheels=[5])) == "malformed entry for 'None': data.wheels[0] must be object"
    long_name = "x" * 150
    problem = schema_problem(_doc(wheels=[{"filename": long_name}]))
    assert problem is not None and problem.startswith(f"malformed entry for {long_name[:100]!r}: data.wheels[0] ")


def test_a_long_schema_message_is_cut_to_200_characters() -> None:
    problem = schema_problem(_doc(wheels=[{"filename": "a.whl"}]))
    assert problem is not None
    prefix = "malformed entry for 'a.whl': "
    message = problem.removeprefix(prefix)
    assert len(message) == 200 and message.endswith("...")
    assert message.startswith("data.wheels[0] must contain ['abi_mode', 'combos', ")
    # A message of 200 or fewer characters is shown whole.
    whole = schema_problem(_doc(base_url="https://x /"))
    assert whole == r"data.base_url must match pattern ^https?://[A-Za-z0-9._~:/\[\]!&()*+,;=%-]+/$"


def test_a_manifest_that_is_not_an_object_of_schema_1_is_refused() -> None:
    for doc in ([], {"schema": 2, "base_url": None, "wheels": []}, {"base_url": None, "wheels": []}):
        with pytest.raises(IndexInputError, match="not a kiln index manifest of schema 1"):
            parse_manifest(json.dumps(doc).encode(), "m.json")
    with pytest.raises(IndexInputError, match=r"m.json: base_url: --base-url 'https://x:99999/': not a URL"):
        parse_manifest(json.dumps(_doc(base_url="https://x:99999/")).encode(), "m.json")
    assert parse_manifest(json.dumps(_doc(base_url="https://x/o/")).encode(), "m.json").base_url == "https://x/o/"


# ---------------------------------------------------------------------------------------------------------
# Entries, and the file as written


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reading")
    make_wheel(root / "dist")
    make_wheel(root / "dist", version="0.2.0+pt213cpu")
    out = root / "site"
    build_index(root / "dist", out, "https://example.org/opkiln/", audit=None)
    return out


@pytest.fixture
def doc(site: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((site / MANIFEST_NAME).read_text())
    return loaded


def _keys_in_order(text: str) -> list[list[str]]:
    found: list[list[str]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found.append([k for k, _ in pairs])
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return found


def test_the_file_is_canonical_one_wheel_a_line_keys_sorted(site: Path) -> None:
    text = (site / MANIFEST_NAME).read_text()
    lines = text.splitlines()
    assert lines[0] == '{"base_url": "https://example.org/opkiln/", "generator": "kiln index", "schema": 1, ' \
                       '"wheels": ['
    assert lines[-1] == "]}" and len(lines) == 4
    objects = _keys_in_order(text)
    assert len(objects) >= 3
    assert all(keys == sorted(keys) for keys in objects), objects
    manifest = load_manifest(site)
    assert manifest is not None and manifest.base_url == "https://example.org/opkiln/"
    assert manifest.to_json() == text


def _stored(entry: dict[str, Any], **fields: Any) -> dict[str, Any]:
    stored = copy.deepcopy(entry)
    stored.update(url=STORED + entry["filename"].replace("+", "%2B"),
                  stored_at="github-release:opkiln/opkiln@v0.1.0", metadata_beside=False)
    stored.update(fields)
    return {k: v for k, v in stored.items() if v is not None}


def _only(doc: dict[str, Any], entry: dict[str, Any]) -> bytes:
    return json.dumps({**doc, "wheels": [entry]}).encode()


def test_a_wheel_in_storage_reads_back_with_where_it_lives(doc: dict[str, Any]) -> None:
    entry = _stored(doc["wheels"][0])
    wheel = parse_manifest(_only(doc, entry), "m").wheels[entry["filename"]]
    assert wheel.url == entry["url"] and wheel.stored_at == "github-release:opkiln/opkiln@v0.1.0"
    assert wheel.metadata_beside is False
    assert wheel.to_json() == entry
    again = parse_manifest(Manifest(base_url=None, wheels={wheel.filename: wheel}).to_json().encode(), "again")
    assert again.wheels == {wheel.filename: wheel}
    beside = _stored(doc["wheels"][0], metadata_beside=True)
    assert parse_manifest(_only(doc, beside), "m").wheels[entry["filename"]].metadata_beside is True


def test_a_wheel_in_the_site_folder_states_no_storage_fields(doc: dict[str, Any]) -> None:
    entry = doc["wheels"][0]
    assert not {"url", "stored_at", "metadata_beside"} & set(entry)
    wheel = parse_manifest(_only(doc, entry), "m").wheels[entry["filename"]]
    assert (wheel.url, wheel.stored_at, wheel.metadata_beside) == (None, None, True)
    assert wheel.to_json() == entry


STORAGE_EDITS: dict[str, tuple[dict[str, Any], str]] = {
    "url without stored_at": ({"stored_at": None}, "come together"),
    "stored_at without url": ({"url": None}, "come together"),
    "metadata_beside alone": ({"url": None, "stored_at": None}, "come together"),
    "url of another file": ({"url": STORED + "opkiln-0.2.0+pt213cpu-cp311-cp311-linux_x86_64.whl"},
                            "does not end in the wheel's file name"),
    "url with a port that is no port": ({"url": "https://h:99999/" + TORCH}, "url: --base-url"),
    "url under a base over the limit": ({"url": "https://h/" + "a" * 600 + "/" + TORCH}, "longer than 500"),
}


@pytest.mark.parametrize("case", sorted(STORAGE_EDITS))
def test_a_stored_entry_that_does_not_hold_together_is_refused(doc: dict[str, Any], case: str) -> None:
    change, reason = STORAGE_EDITS[case]
    entry = _stored(next(w for w in doc["wheels"] if w["filename"] == TORCH), **change)
    if case == "metadata_beside alone":
        entry["metadata_beside"] = True
    with pytest.raises(IndexInputError, match=re.escape(f"m: malformed entry for '{TORCH}': ")) as caught:
        parse_manifest(_only(doc, entry), "m")
    assert reason in str(caught.value)


@pytest.mark.parametrize("folder", ["a/", "a/b/c/", "", "d" * 450 + "/"])  # the last: only the base is <= 500
def test_a_stored_url_may_sit_at_any_depth(doc: dict[str, Any], folder: str) -> None:
    entry = _stored(doc["wheels"][0], url=None)
    entry.update(url=f"https://h.example/{folder}{entry['filename']}", stored_at="s3:bucket/" + entry["filename"])
    assert parse_manifest(_only(doc, entry), "m").wheels[entry["filename"]].url == entry["url"]


def test_from_wheel_carries_every_field_and_where_the_wheel_lives(tmp_path: Path) -> None:
    path = make_wheel(tmp_path / "dist", requires_python=">=3.10")
    sha256, size = file_sha256(path)
    info = inspect_wheel(path.name, check_wheel_name(path.name), path, sha256, size)
    combos = frozenset({Combination("2.13", "cpu")})
    local = PublishedWheel.from_wheel(info, combos)
    assert (local.url, local.stored_at, local.metadata_beside) == (None, None, True)
    assert local.requires_python == ">=3.10" and local.sha256 == sha256 and local.size == size
    assert local.combos == (Combination("2.13", "cpu"),)
    stored = PublishedWheel.from_wheel(info, combos, STORED + path.name, "s3:b/k", metadata_beside=False)
    assert (stored.url, stored.stored_at, stored.metadata_beside) == (STORED + path.name, "s3:b/k", False)


# ---------------------------------------------------------------------------------------------------------
# The manifest file itself


def test_a_manifest_that_is_a_link_or_a_folder_is_refused(site: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / MANIFEST_NAME).symlink_to(site / MANIFEST_NAME)
    with pytest.raises(IndexInputError, match="not a regular file"):
        load_manifest(linked)
    folder = tmp_path / "folder"
    (folder / MANIFEST_NAME).mkdir(parents=True)
    with pytest.raises(IndexInputError, match="not a regular file"):
        load_manifest(folder)
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / MANIFEST_NAME).symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(IndexInputError, match="not a regular file"):
        load_manifest(dangling)


SHA = "0" * 64


@pytest.mark.parametrize(("given", "length"), [({"sha256": SHA, "combos": []}, 200), ({"metadata_sha256": SHA}, 201)])
def test_a_schema_message_of_200_characters_is_shown_whole_and_one_of_201_is_cut(given: dict[str, Any],
                                                                                 length: int) -> None:
    """The entries leave out fields so that the schema's message (which lists what is missing) is 200 and
    201 characters long."""
    import fastjsonschema

    from kiln_tool.index.manifest import _validator

    doc = _doc(wheels=[{"filename": "a.whl", **given}])
    with pytest.raises(fastjsonschema.JsonSchemaValueException) as raw:
        _validator()(doc)
    whole = " ".join(str(raw.value.message).split())
    assert len(whole) == length  # the case is what it says
    problem = schema_problem(doc)
    assert problem == "malformed entry for 'a.whl': " + (whole if length <= 200 else whole[:197] + "...")


def test_a_run_refuses_to_write_what_the_next_run_would_refuse(site: Path) -> None:
    """index/publish.py _accepted_by_next_run: the entries a run adds, read back by the reader every later run
    uses, before anything is written."""
    from dataclasses import replace

    from kiln_tool.index.publish import _accepted_by_next_run

    manifest = load_manifest(site)
    assert manifest is not None
    name = sorted(manifest.wheels)[0]
    _accepted_by_next_run(manifest, [name])  # as written: accepted
    unreadable = Manifest(manifest.base_url, {**manifest.wheels, name: replace(manifest.wheels[name], size=-1)})
    with pytest.raises(IndexInputError, match=re.escape("refusing: the next run would refuse the site this run "
                                                        "would write: kiln-index.json: malformed entry for")):
        _accepted_by_next_run(unreadable, [name])
    combo = manifest.wheels[name].combos[0]
    repeated = replace(manifest.wheels[name], combos=(combo, combo))  # read back once
    with pytest.raises(IndexInputError, match="does not read back as written"):
        _accepted_by_next_run(Manifest(manifest.base_url, {**manifest.wheels, name: repeated}), [name])
