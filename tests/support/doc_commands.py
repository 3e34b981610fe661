"""The shell commands a doc tells its reader to run, so a test can run every one of them.

A command is a line of a fenced ```sh (or ```bash / ```console) block; a line ending in a
backslash continues on the next; blank lines and whole-line comments are not commands; a
leading "$ " prompt and a trailing "  # comment" are dropped. Each command keeps the doc line
it starts on, so a failing test can name it (docs/adding-an-op.md:42).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^\s*```(\w*)\s*$")
_SHELL_LANGS = {"sh", "bash", "console", "shell"}
_TRAILING_COMMENT = re.compile(r"\s+#\s.*$")


@dataclass(frozen=True)
class DocCommand:
    doc: Path
    line: int  # 1-based line of the doc the command starts on
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"


def doc_commands(doc: Path) -> list[DocCommand]:
    """Every shell command of `doc`'s sh/bash/console blocks, in order."""
    commands: list[DocCommand] = []
    in_shell = in_block = False
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        fence = _FENCE.match(raw)
        if fence:
            if in_block:
                if pending:
                    raise ValueError(f"{doc}:{start}: a continued command runs into the end of its block")
                in_block = in_shell = False
            else:
                in_block, in_shell = True, fence.group(1) in _SHELL_LANGS
            continue
        if not in_shell:
            continue
        line = raw.strip()
        if not pending:
            if not line or line.startswith("#"):
                continue
            start = number
            line = line.removeprefix("$ ")
        if line.endswith("\\"):
            pending.append(line[:-1].rstrip())
            continue
        pending.append(_TRAILING_COMMENT.sub("", line))
        commands.append(DocCommand(doc, start, " ".join(part for part in pending if part)))
        pending = []
    if in_block:
        raise ValueError(f"{doc}: a fenced block is never closed")
    return commands
