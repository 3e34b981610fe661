"""Round 2: an input is accepted only if the site it produces is accepted by the next run.

Generated command-line values (--base-url), wheel-name parts and METADATA fields: each run keeps the
promises (exit 0/1/2, no traceback, nothing outside OUT, a refusal leaves the site byte-identical), and
after every accepted run the next run accepts its site and a published name keeps its bytes.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.synthetic_wheels import make_wheel
from trust.kiln_runs import assert_kept_promises, kiln, outside, tree

PROFILE = settings(max_examples=25, derandomize=True, database=None, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _published(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (out / "wheels").glob("*.whl")} \
        if (out / "wheels").is_dir() else {}


def _accepted_then_accepted_again(*args: str, knobs: dict[str, object]) -> None:
    root = Path(tempfile.mkdtemp(prefix="kiln-rt-"))
    try:
        out = root / "site"
        make_wheel(root / "dist0")
        assert kiln("index", root / "dist0", out).code == 0
        try:
            make_wheel(root / "dist", **{"version": "0.2.0+pt213cpu", **knobs})
        except (ValueError, OSError):
            return  # a name the file system refuses is no input to kiln
        before_site, before_outside, published = tree(out), outside(root, out), _published(out)
        run = kiln("index", *args, root / "dist", out)
        assert_kept_promises(run, root, out, before_outside, before_site)
        after = _published(out)
        assert {k: after[k] for k in published} == published, "a published name got other bytes"
        if run.code == 0:
            make_wheel(root / "dist3", version="0.3.0+pt213cpu")
            again = kiln("index", root / "dist3", out)
            assert again.code == 0, f"the next run refuses the site this run wrote: {again.stderr}"
            assert {k: _published(out)[k] for k in after} == after
    finally:
        shutil.rmtree(root, ignore_errors=True)


URL_PARTS = ["", "?", "#", "?#", "?a=1", "#x", "/", "//", "%20", "\u00a0", "\u2003", "\u3000", "\t", " ", "@",
             "user:pass@", ":", ":0", ":99999", ":abc", "[", "]", "'", '"', "<", "`", "\\", "é", "$", "~", "a" * 600]


@PROFILE
@given(scheme=st.sampled_from(["https://", "http://", "ftp://", "", "HTTPS://", "https:/"]),
       head=st.lists(st.sampled_from(URL_PARTS), max_size=2).map("".join),
       host=st.sampled_from(["example.org", "", "127.0.0.1:8000", "[::1]", "ex ample.org", "a.b"]),
       tail=st.lists(st.sampled_from([*URL_PARTS, "x", "wheels/"]), max_size=4).map("".join))
def test_base_url_values(scheme: str, head: str, host: str, tail: str) -> None:
    url = f"{scheme}{head}{host}/{tail}"
    if "\0" in url:
        return
    _accepted_then_accepted_again("--base-url", url, knobs={})


name_parts = st.sampled_from(["opkiln", "opkiln_", "OpKiln", "op_kiln", "opkiln.", "opkiln-x", "Opkiln__"])
platforms = st.sampled_from(["linux_x86_64", "linux+x86_64", "manylinux_2_28_x86_64", "manylinux_2_28_x86_64+x",
                             "manylinux_2_34_x86_64.linux_x86_64", "any", "linux_x86_64.linux_aarch64",
                             "manylinux_2_28_aarch64", "Linux_X86_64"])
versions = st.one_of(st.sampled_from(["0.2.0+pt213cpu", "0.2.0+PT213CPU", "0.2+pt213cpu", "0.2.0.0+pt213cpu",
                                      "0.2.0+pt213cpu.1", "1!0.2.0+pt213cpu", "0.2.0rc1+pt213cpu"]),
                     st.integers(1, 90).map(lambda n: "0." + ".".join(["1"] * n) + "+pt213cpu"))


@PROFILE
@given(name=name_parts, platform=platforms, version=versions)
def test_wheel_name_parts(name: str, platform: str, version: str) -> None:
    _accepted_then_accepted_again(knobs={"name": name, "platform": platform, "version": version})


specifiers = st.one_of(
    st.sampled_from([">=3.10", "===3.11", "===3.11;x", "==3.*", ">=3.10,<4", "~=3.10", ">= 3.10", ">=3.10, <4",
                     "!=3.9.*", "<script>", ">=3.10 ; x", ">=3.1O", "", ">=3.10,,<4", "=== 3.11"]),
    st.integers(1, 60).map(lambda n: ">=3.10," + ",".join(["!=3.9.1"] * n)),
)


@PROFILE
@given(requires_python=specifiers,
       extra=st.lists(st.sampled_from(["Requires-Dist: numpy>=1", "Requires-Dist: x @ https://e.org/x.whl",
                                       "Requires-Dist: numpy; extra == 'a'", "Provides-Extra: a",
                                       "Requires-Dist: torch>=2.13", "Name: other", "Version: 9"]), max_size=2))
def test_metadata_fields(requires_python: str, extra: list[str]) -> None:
    _accepted_then_accepted_again(knobs={"requires_python": requires_python or None, "metadata_lines": extra})
