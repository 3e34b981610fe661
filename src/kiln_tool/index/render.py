"""HTML for every page of the index. Pure functions: published wheels in, text out.

Links to wheels are relative (the site works wherever it is served, mirrors
included); every file name is percent-encoded in hrefs ("+" as %2B, as static
hosts that read "+" as a space need) and every attribute and text is
HTML-escaped. Output is deterministic: no time stamps, sorted everywhere.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from html import escape
from importlib import resources
from string import Template
from urllib.parse import quote

from .combos import Combination, cuda_label, python_support
from .manifest import PublishedWheel
from .sdists import SDIST_DIR, PublishedSdist

WHEEL_DIR = "wheels"
SIMPLE_DIR = "simple"


def _e(text: str) -> str:
    # Most values (file names, URLs, digests) have nothing to escape: five scans cost less than five copies.
    if "&" in text or "<" in text or ">" in text or '"' in text or "'" in text:
        return escape(text, quote=True)
    return text


def wheel_href(prefix: str, wheel: PublishedWheel) -> str:
    """The wheel's own absolute URL when it lives in storage; else relative to the site folder."""
    where = wheel.url if wheel.url is not None else f"{prefix}{quote(wheel.filename, safe='')}"
    return f"{where}#sha256={wheel.sha256}"


@cache
def anchor(prefix: str, wheel: PublishedWheel) -> str:
    """One link as PEP 503 / 658 / 714 describe it (pip reads the same attributes on find-links pages)."""
    attrs = [f'href="{_e(wheel_href(prefix, wheel))}"']
    if wheel.requires_python:
        attrs.append(f'data-requires-python="{_e(wheel.requires_python)}"')
    if wheel.metadata_beside:  # never announce a .metadata file its host does not serve (a 404)
        attrs.append(f'data-dist-info-metadata="sha256={wheel.metadata_sha256}"')
        attrs.append(f'data-core-metadata="sha256={wheel.metadata_sha256}"')
    return f"<a {' '.join(attrs)}>{_e(wheel.filename)}</a><br>"


def _links_page(title: str, prefix: str, wheels: Iterable[PublishedWheel], repository_version: bool = False) -> str:
    meta = '  <meta name="pypi:repository-version" content="1.0">\n' if repository_version else ""
    ordered = sorted(wheels, key=lambda w: w.filename)
    links = "\n".join(f"  {anchor(prefix, w)}" for w in ordered)
    without = sum(1 for w in ordered if not w.metadata_beside)
    note = (f"  <p>{without} wheel(s) here have no PEP 658 metadata file: their storage does not serve one, so "
            "installers download the wheel to read its metadata.</p>\n") if without else ""
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n  <meta charset=\"utf-8\">\n"
        f"{meta}  <title>{_e(title)}</title>\n</head>\n<body>\n  <h1>{_e(title)}</h1>\n{note}"
        f"{links}\n</body>\n</html>\n"
    )


def find_links_page(combo: Combination, wheels: Iterable[PublishedWheel]) -> str:
    """``<cuda>/torch<minor>/index.html``, for ``pip install <project> -f``."""
    return _links_page(f"Wheels for torch {combo.torch} ({combo.cuda_label})", f"../../{WHEEL_DIR}/", wheels)


def flat_page(combo: Combination, wheels: Iterable[PublishedWheel]) -> str:
    """``torch-<minor>.0+<cuda>.html`` at the site root, the data.pyg.org layout."""
    return _links_page(f"Wheels for torch-{combo.torch}.0+{combo.cuda}", f"{WHEEL_DIR}/", wheels)


def source_page(project: str, sdists: Iterable[PublishedSdist]) -> str:
    """``source/index.html``: the project's sdists alone, for ``pip install <project> --no-binary <project>
    --no-build-isolation -f <this page>`` on a torch no wheel page has. Wheel pages never list an sdist: pip
    would build one behind a user's back wherever no wheel fits."""
    links = []
    for sdist in sorted(sdists, key=lambda s: s.filename):
        where = sdist.url if sdist.url is not None else f"../{SDIST_DIR}/{quote(sdist.filename, safe='')}"
        links.append(f'  <a href="{_e(where)}#sha256={sdist.sha256}">{_e(sdist.filename)}</a><br>')
    title = f"Source distributions of {project} (build against the torch you have)"
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n  <meta charset=\"utf-8\">\n"
        f"  <title>{_e(title)}</title>\n</head>\n<body>\n  <h1>{_e(title)}</h1>\n"
        f"  <p>pip install {_e(project)} --no-binary {_e(project)} --no-build-isolation -f &lt;this page&gt; "
        "(needs torch installed first, a C++ compiler, and nvcc for a CUDA torch)</p>\n"
        + "\n".join(links) + "\n</body>\n</html>\n"
    )


def simple_root(projects: Iterable[str]) -> str:
    links = "\n".join(f'  <a href="{_e(quote(p))}/">{_e(p)}</a><br>' for p in sorted(projects))
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n  <meta charset=\"utf-8\">\n"
        '  <meta name="pypi:repository-version" content="1.0">\n  <title>Simple index</title>\n'
        f"</head>\n<body>\n{links}\n</body>\n</html>\n"
    )


def simple_project(project: str, wheels: Iterable[PublishedWheel]) -> str:
    """``simple/<project>/index.html`` (PEP 503), two levels below the site root."""
    return _links_page(f"Links for {project}", f"../../{WHEEL_DIR}/", wheels, repository_version=True)


@dataclass(frozen=True)
class Site:
    """What the landing page shows."""

    project: str
    base_url: str | None
    combos: Mapping[Combination, Sequence[PublishedWheel]]
    pythons: Sequence[str]
    torch_pythons: Mapping[str, Sequence[str]]
    """torch major.minor -> Pythons that torch release exists for (a stable-ABI wheel fits no others)."""
    torch_index: str | None = None
    """torch's own index, ``{variant}`` standing for the CUDA tag (data/matrix.json)."""
    source: bool = False
    """Whether the site publishes sdists (source/index.html): the landing page then says how to build one."""


def _template(name: str) -> str:
    return resources.files(__package__).joinpath("templates").joinpath(name).read_text(encoding="utf-8")


def _py_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def supported_pythons(wheel: PublishedWheel, pythons: Sequence[str]) -> list[str]:
    minimum, abi3 = python_support(wheel.python_tag)
    if not abi3:
        return [minimum]
    return [p for p in pythons if _py_key(p) >= _py_key(minimum)] or [minimum]


def landing_page(site: Site) -> str:
    combos = sorted(site.combos, key=lambda c: c.sort_key)
    pythons = sorted(set(site.pythons), key=_py_key)
    torch_versions = sorted({c.torch for c in combos}, key=_py_key, reverse=True)
    cuda_tags = sorted({c.cuda for c in combos}, key=lambda t: (t != "cpu", -int(t[2:]) if t != "cpu" else 0))

    def command(combo: Combination) -> str:
        url = f"{site.base_url}{combo.page}" if site.base_url else combo.page
        return f"pip install {site.project} -f {url}"

    data_combos = []
    rows = []
    for combo in combos:
        wheels = site.combos[combo]
        per_python: dict[str, set[str]] = {}
        torch_has = site.torch_pythons.get(combo.torch)
        for wheel in wheels:
            for py in supported_pythons(wheel, pythons):
                if torch_has is None or py in torch_has or f"cp{py.replace('.', '')}" == wheel.python_tag:
                    per_python.setdefault(py, set()).update(wheel.platforms)
        data_combos.append({
            "torch": combo.torch, "cuda": combo.cuda, "page": combo.page, "flat": combo.flat_page,
            "pythons": {py: sorted(platforms) for py, platforms in sorted(per_python.items())},
            "versions": sorted({w.version for w in wheels}),
        })
        cells = []
        for py in pythons:
            platforms = per_python.get(py)
            if platforms:
                cells.append(f'<td class="yes" title="{_e(", ".join(sorted(platforms)))}">✓ <small>'
                             f'{_e(_short_platforms(platforms))}</small></td>')
            else:
                cells.append('<td class="no">—</td>')
        rows.append(
            f'<tr data-torch="{_e(combo.torch)}" data-cuda="{_e(combo.cuda)}">'
            f"<th scope=\"row\">{_e(combo.torch)}</th><td>{_e(combo.cuda_label)}</td>{''.join(cells)}"
            f'<td><code class="cmd" data-page="{_e(combo.page)}">{_e(command(combo))}</code><br>'
            f'<a href="{_e(combo.page)}">find-links page</a> · <a href="{_e(quote(combo.flat_page))}">flat page</a>'
            "</td></tr>"
        )
    header = "".join(f'<th scope="col">Python {_e(py)}</th>' for py in pythons)
    table = (
        '<table id="coverage">\n<thead><tr><th scope="col">PyTorch</th><th scope="col">Compute</th>'
        f'{header}<th scope="col">Install</th></tr></thead>\n<tbody>\n' + "\n".join(rows) + "\n</tbody>\n</table>"
    )
    if not combos:
        table = "<p>No wheels published yet.</p>"

    def options(values: Iterable[str], label: Mapping[str, str] | None = None) -> str:
        return "".join(f'<option value="{_e(v)}">{_e((label or {}).get(v, v))}</option>' for v in values)

    data = {
        "project": site.project,
        "base_url": site.base_url,
        "combos": data_combos,
        "torch_index": site.torch_index,
    }
    data_json = script_json(data)
    simple_url = f"{site.base_url}{SIMPLE_DIR}/" if site.base_url else f"{SIMPLE_DIR}/"
    return Template(_template("landing.html")).substitute(
        project=_e(site.project),
        css=_template("landing.css"),
        js=_template("landing.js"),
        data_json=data_json,
        torch_options=options(torch_versions),
        cuda_options=options(cuda_tags, {t: cuda_label(t) for t in cuda_tags}),
        python_options=options(pythons),
        coverage_table=table,
        simple_url=_e(simple_url),
        simple_command=_e(f"pip install --index-url {simple_url} {site.project}"),
        source_note=_source_note(site),
    )


def _source_note(site: Site) -> str:
    if not site.source:
        return ""
    url = f"{site.base_url}source/" if site.base_url else "source/"
    command = shlex.join(["pip", "install", site.project, "--no-binary", site.project, "--no-build-isolation", "-f",
                          url])  # a command users paste: one that shlex.split gives back as these arguments
    return ("\n  <p>No wheel for your PyTorch or CUDA? The <a href=\"source/\">source distributions</a> build against "
            f"the torch you have installed (with torch-kiln, a C++ compiler, and nvcc for a CUDA torch): "
            f"<code>{_e(command)}</code></p>")


_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                  "\u2028": "\\u2028", "\u2029": "\\u2029"})


def script_json(data: object) -> str:
    """JSON to embed in a <script> element: no character of it can open or close markup
    ("<", ">", "&" as \\u escapes, which JSON.parse reads back as the same text), nor end a line
    for old JavaScript parsers (U+2028, U+2029)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).translate(_SCRIPT_ESCAPES)


def _short_platforms(platforms: Iterable[str]) -> str:
    """``manylinux_2_28_x86_64`` -> ``x86_64``: the table shows architectures; the title has the full tags."""
    archs = set()
    for platform in platforms:
        for arch in ("x86_64", "aarch64", "arm64", "ppc64le", "s390x", "amd64", "win32", "i686", "universal2"):
            if platform.endswith(arch):
                archs.add(arch)
                break
        else:
            archs.add(platform)
    return ", ".join(sorted(archs))
