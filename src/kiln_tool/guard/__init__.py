"""kiln's import guard, generated into every package kiln builds as ``<package>/_kiln/``.

This folder is a template: kiln copies each of its ``.py`` files verbatim into the wheel, beside the
package's ``_build_info.json`` (kiln's CMake API for ``build = "kiln"`` projects, kiln_tool.relabel for
``build = "backend"`` ones). Nothing in it is edited per package: the package, its distribution, its
libraries, op manifest and index URL all come from that build info, read at import, and the settings'
prefix from the package's name (``OPKILN_SKIP_PREFLIGHT`` for ``opkiln``).

The package's ``__init__.py`` uses it in two lines::

    from ._kiln import guard
    guard.load(__name__)

Standard library only (plus the torch the package imports anyway); docs/import-guard.md tells why it is
generated into each package rather than shipped as a runtime dependency.
"""
