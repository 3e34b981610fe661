"""The landing page's source command is pasted into a shell: whatever base URL the site is served at, the command
in the page (HTML unescaped) must split back into exactly pip's arguments, and never run anything else."""

from __future__ import annotations

import html
import re
import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.index.render import Site, _source_note

URLS = st.one_of(st.just("https://example.org/wheels/"),
                 st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).map(
                     lambda t: f"https://example.org/{t}/"))


@settings(max_examples=200, deadline=None)
@given(base_url=URLS, project=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True))
def test_the_pasted_command_is_pips_arguments_alone(base_url: str, project: str) -> None:
    site = Site(project=project, base_url=base_url, combos={}, pythons=[], torch_pythons={}, source=True)
    code = re.search(r"<code>(.*?)</code>", _source_note(site), re.DOTALL)
    assert code is not None
    assert shlex.split(html.unescape(code.group(1))) == [
        "pip", "install", project, "--no-binary", project, "--no-build-isolation", "-f", f"{base_url}source/"]


def test_a_site_without_sdists_says_nothing() -> None:
    assert _source_note(Site(project="p", base_url=None, combos={}, pythons=[], torch_pythons={})) == ""
