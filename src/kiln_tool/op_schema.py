"""The schemas `kiln new-op --schema` accepts: a strict subset of torch's schema language.

    NAME(Tensor a, Tensor b, float s, int n, bool flag) -> Tensor
    NAME(Tensor a, ...) -> (Tensor, Tensor)          returns may be named: (Tensor out, Tensor argmax)

Arguments are `Tensor`, `float`, `int` or `bool` (what the facade's kernel functions take:
`const Tensor&`, `double`, `std::int64_t`, `bool`), each with a name; the first is a Tensor
(the outputs' device and dtype come from it); no defaults, optionals, lists, keyword-only
arguments, aliasing or overload names. Everything else is refused with a SchemaError that
says where and what was expected. Where torch is importable, torch's own parser must accept
the schema too (kiln_tool itself never needs torch).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

ARG_TYPES = ("Tensor", "float", "int", "bool")
CXX_TYPES = {"Tensor": "const Tensor&", "float": "double", "int": "std::int64_t", "bool": "bool"}
PY_TYPES = {"Tensor": "Tensor", "float": "float", "int": "int", "bool": "bool"}
_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(->)|([(),])|(\S))")
_IDENT = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
# Names the generated code itself uses next to the arguments.
RESERVED_ARGS = frozenset({"kind", "begin", "end", "stream", "n", "m", "g", "out", "self", "ctx", "grad", "guard",
                           "device", "dtype", "torch", "opkiln", "grads", "tensors", "scalars"})


_UNSUPPORTED = {
    "=": ": defaults are not supported", "?": ": optionals (Tensor?) are not supported",
    "[": ": lists (Tensor[], int[]) are not supported", "*": ": keyword-only arguments are not supported",
    "!": ": aliasing annotations (Tensor(a!)) are not supported", ".": ": overload names (NAME.overload) are not "
    "supported",
}


class SchemaError(ValueError):
    """The schema is outside what the scaffold accepts; the message says where."""


@dataclass(frozen=True)
class Arg:
    type: str  # one of ARG_TYPES
    name: str

    @property
    def is_tensor(self) -> bool:
        return self.type == "Tensor"


@dataclass(frozen=True)
class Schema:
    name: str
    args: tuple[Arg, ...]
    returns: tuple[str, ...]  # output names (generated when the schema leaves them out)
    text: str  # canonical: what m.def gets

    @property
    def tensors(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_tensor)

    @property
    def scalars(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if not a.is_tensor)


def _tokens(text: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # trailing white space
            break
        if m.group(4) is not None:
            hint = _UNSUPPORTED.get(m.group(4), "")
            raise SchemaError(f"unexpected {m.group(4)!r} at column {m.start(4) + 1} of {text!r}{hint}")
        token = m.group(1) or m.group(2) or m.group(3)
        out.append((token, m.start() + len(m.group(0)) - len(token) + 1))
        pos = m.end()
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at][0] if self.at < len(self.tokens) else None

    def take(self, what: str) -> tuple[str, int]:
        if self.at >= len(self.tokens):
            raise SchemaError(f"{self.text!r} ends where {what} was expected")
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expect(self, token: str, what: str | None = None) -> None:
        got, col = self.take(what or repr(token))
        if got != token:
            raise SchemaError(f"expected {what or repr(token)} at column {col} of {self.text!r}, got {got!r}")


def _name(reader: _Reader, what: str) -> str:
    name, col = reader.take(what)
    if not _IDENT.fullmatch(name):
        raise SchemaError(f"{what} {name!r} at column {col} of {reader.text!r} is not a snake_case name")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise SchemaError(f"{what} {name!r} is a Python keyword")
    return name


def parse(text: str, cxx_keywords: frozenset[str] = frozenset()) -> Schema:
    """The schema `text`, checked; SchemaError when it is outside the accepted subset."""
    if not isinstance(text, str) or not text.strip():
        raise SchemaError("the schema is empty; expected NAME(Tensor x, ...) -> Tensor")
    if not text.isascii() or any(c in text for c in "\n\r\t\0"):
        raise SchemaError(f"the schema {text!r} must be one line of ASCII")
    r = _Reader(text)
    name = _name(r, "op name")
    r.expect("(")
    args: list[Arg] = []
    if r.peek() != ")":
        while True:
            type_, col = r.take("an argument type")
            if type_ not in ARG_TYPES:
                raise SchemaError(f"argument type {type_!r} at column {col} of {text!r} is not one of "
                                  f"{', '.join(ARG_TYPES)}")
            arg = _name(r, "argument name")
            if arg in cxx_keywords:
                raise SchemaError(f"argument name {arg!r} is a C++ keyword")
            if arg in RESERVED_ARGS or arg == name:
                raise SchemaError(f"argument name {arg!r} is reserved (the generated code uses it)")
            if any(a.name == arg for a in args):
                raise SchemaError(f"argument name {arg!r} appears twice")
            args.append(Arg(type_, arg))
            sep, col = r.take("',' or ')'")
            if sep == ")":
                break
            if sep != ",":
                raise SchemaError(f"expected ',' or ')' at column {col} of {text!r}, got {sep!r} (defaults, "
                                  f"optionals and lists are not supported)")
    else:
        r.take("')'")
    if not args or not args[0].is_tensor:
        raise SchemaError("the first argument must be a Tensor (the outputs take its device and dtype)")
    r.expect("->", "'->'")
    returns: list[str] = []
    parenthesised = r.peek() == "("
    if parenthesised:
        r.take("'('")
    while True:
        type_, col = r.take("'Tensor'")
        if type_ != "Tensor":
            raise SchemaError(f"the op must return Tensor or (Tensor, ...); got {type_!r} at column {col} of {text!r}")
        out = ""
        if r.peek() not in (None, ",", ")"):
            out = _name(r, "return name")
            if out in cxx_keywords or out in RESERVED_ARGS or any(a.name == out for a in args) or out in returns:
                raise SchemaError(f"return name {out!r} is reserved, a C++ keyword or taken by an argument")
        returns.append(out)
        if not parenthesised:
            break
        sep, col = r.take("',' or ')'")
        if sep == ")":
            break
        if sep != ",":
            raise SchemaError(f"expected ',' or ')' at column {col} of {text!r}, got {sep!r}")
    if r.peek() is not None:
        token, col = r.take("the end")
        raise SchemaError(f"unexpected {token!r} at column {col} of {text!r} after the returns")
    if any(returns) and not all(returns):
        raise SchemaError("name every return or none")
    names = tuple(returns) if all(returns) else (("out",) if len(returns) == 1 else
                                                 tuple(f"out{i}" for i in range(len(returns))))
    ret = " ".join(f"Tensor {n}".strip() for n in returns) if len(returns) == 1 else \
        "(" + ", ".join(f"Tensor {n}".strip() for n in returns) + ")"
    canonical = f"{name}({', '.join(f'{a.type} {a.name}' for a in args)}) -> {ret}"
    _check_with_torch(canonical)
    return Schema(name, tuple(args), names, canonical)


def _check_with_torch(text: str) -> None:
    try:
        import torch
    except ImportError:
        return
    try:
        torch._C.parse_schema(text)
    except RuntimeError as exc:  # pragma: no cover - the strict parser refuses first
        raise SchemaError(f"torch's schema parser refuses {text!r}: {exc}") from exc


def elementwise(name: str) -> Schema:
    """The default schema of `kiln new-op NAME`: NAME(Tensor x) -> Tensor."""
    return parse(f"{name}(Tensor x) -> Tensor")
