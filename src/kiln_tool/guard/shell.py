"""The one way kiln's guard, doctor and ranks check turn values into a command a person pastes.

A fix is a list of arguments joined with ``shlex.join``: ``shlex.split`` of the printed text gives back exactly
those arguments, whatever they hold. Each argument is first checked where it entered (an environment variable,
the build info, a path on disk, another rank's answer): a value a terminal cannot show as itself (a control
character, a newline, a bidi override, an escape sequence) or of unbounded length is refused with its own
message, never printed. Standard library only: this file is copied into every kiln-built package.
"""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlsplit

MAX_VALUE = 2048
"""The longest single value a fix may hold (a URL, a path, a name)."""
URL_SCHEMES = ("https", "http", "file")
_DIST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.!+_-]*[A-Za-z0-9])?")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


class UnsafeValue(ValueError):
    """A value that cannot be shown in a command safely; the message names where it came from and why."""


def shown(value: object, limit: int = 80) -> str:
    """``value`` for a message about it: its repr (control characters escaped), cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(value: object, what: str, limit: int = MAX_VALUE) -> str:
    """``value`` when it is a string a terminal shows as itself and at most ``limit`` long; else UnsafeValue
    naming ``what`` (where it came from)."""
    if not isinstance(value, str):
        raise UnsafeValue(f"{what} is not text: {shown(value)}")
    if len(value) > limit:
        raise UnsafeValue(f"{what} is {len(value)} characters long (at most {limit}): {shown(value)}")
    if not value.isprintable():
        raise UnsafeValue(f"{what} holds a control or invisible character, which would not show as itself in a "
                          f"command: {shown(value)}")
    return value


def url(value: object, what: str) -> str:
    """A base URL for a fix: printable, no whitespace, ``https``/``http``/``file`` with a host (file: a path);
    returned without its trailing slashes."""
    text = printable(value, what).strip()
    if any(ch.isspace() for ch in text):
        raise UnsafeValue(f"{what} holds whitespace, so it is not one URL: {shown(text)}")
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise UnsafeValue(f"{what} is not a URL ({exc}): {shown(text)}") from None
    if parts.scheme not in URL_SCHEMES:
        raise UnsafeValue(f"{what} is not an {'/'.join(URL_SCHEMES)} URL: {shown(text)}")
    if parts.scheme != "file" and not parts.hostname:
        raise UnsafeValue(f"{what} names no host: {shown(text)}")
    if text.startswith("-"):
        raise UnsafeValue(f"{what} starts with '-': {shown(text)}")
    return text.rstrip("/")


def dist_name(value: object, what: str) -> str:
    """A distribution name as pip takes it (PEP 508's name: letters, digits, ``._-``)."""
    text = printable(value, what, 200)
    if not _DIST_NAME.fullmatch(text):
        raise UnsafeValue(f"{what} is not a distribution name: {shown(text)}")
    return text


def version(value: object, what: str) -> str:
    """A version as it appears in a requirement (``0.3.0+pt214cu130``)."""
    text = printable(value, what, 200)
    if not _VERSION.fullmatch(text):
        raise UnsafeValue(f"{what} is not a version: {shown(text)}")
    return text


def env_name(value: object, what: str) -> str:
    text = printable(value, what, 200)
    if not _ENV_NAME.fullmatch(text):
        raise UnsafeValue(f"{what} is not an environment variable name: {shown(text)}")
    return text


def command(*args: str) -> str:
    """The arguments as one shell command: ``shlex.split(command(*args)) == list(args)``. Every argument must be
    printable (checked here too, so no caller can skip it)."""
    checked = [printable(arg, "an argument of a fix") for arg in args]
    if not checked:
        raise UnsafeValue("a fix needs at least one argument")
    text = shlex.join(checked)
    if shlex.split(text) != checked:  # shlex.join guarantees this; a failure here is a bug, not input
        raise AssertionError(f"a fix does not round-trip through shlex.split: {text!r}")
    return text


def with_env(assignments: dict[str, str], *args: str) -> str:
    """``env NAME=value ... command args``: through env(1), so an assignment the shell must quote is still an
    assignment (a quoted ``'A=b c' cmd`` would be a command named ``A=b c``)."""
    words = [f"{env_name(name, 'a variable of a fix')}={printable(value, name)}" for name, value in assignments.items()]
    return command("env", *words, *args)


__all__ = ["MAX_VALUE", "UnsafeValue", "command", "dist_name", "env_name", "printable", "shown", "url", "version",
           "with_env"]
