"""`kiln new-op NAME [--kind KIND] [--schema SCHEMA] [--backward] [--box-layout LAYOUT] [--box-columns N]
[--param NAME:TYPE=DEFAULT ...]`: the files of a new op, from the templates in
kiln_tool/templates/new_op/, shaped by its kind (KINDS) and schema (kiln_tool/op_schema.py; default
NAME(Tensor x) -> Tensor).

Kinds (KINDS, which `kiln new-op --help` lists): "elementwise" (the default: any schema, a kernel over the
first tensor's elements, the binding and wrapper in the schema's order), and three that write a member of
a family on its shared home, the op's files holding only its own math: "rowwise" (a row-wise reduction,
ops/common/row_reduce.h, schema rowwise_schemas), "roi" (the RoI family, ops/common/roi_family.h and
facade/roi_family.h, schema roi_schemas, wrapper in torchvision's RoI signature; its rois' columns
(--box-layout, --box-columns: box_layout) and the op's own parameters (--param: op_param) are inputs) and "ps-roi" (the
position-sensitive RoI family, ops/common/ps_roi.h, schema ps_roi_schemas). A family's schemas come from
its one function and every parameter list written is generated from them; `disagreements` checks any
op of a tree (an elementwise op's trimmed --backward too) for places that no longer agree with its schema.

What it writes is what docs/adding-an-op.md walks through:
  ops/NAME/NAME.h, NAME_cpu.cpp, NAME_cuda.cu   the kernel core (raw pointers, no torch header)
  ops/NAME/binding.cpp                           schemas, checks, registrations (both ABI modes)
  python/opkiln/ops.py                           + a section: typed wrapper, register_fake,
                                                   register_autograd (with --backward: the backward
                                                   op's fake impl and a double-backward guard; else
                                                   "not differentiable"), NAME in __all__ and in the
                                                   docstring's op list
  tests/ops/test_NAME.py                         reference, opcheck, gradient and bad-input tests
No registry line: the build finds an op by its ops/NAME/binding.cpp. The skeleton builds; its
kernels write kNotWritten (common/common.h), so its value tests fail until the kernels (and the
reference) are written, and only those.

A bad NAME or schema, or a NAME that is taken, is refused before anything is written; the files
are written all or none.
"""

from __future__ import annotations

import ast
import builtins
import json
import keyword
import math
import re
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template

from .op_schema import CXX_TYPES, PY_TYPES, Arg, Schema, SchemaError
from .op_schema import parse as parse_schema

TEMPLATES = Path(__file__).resolve().parent / "templates" / "new_op"

# snake_case: lower-case words of letters and digits joined by single underscores.
_NAME_RE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_NAME_LENGTH = 64

def _cxx_keywords() -> frozenset[str]:
    lines = (TEMPLATES / "cxx_keywords.txt").read_text().splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


CXX_KEYWORDS = _cxx_keywords()

# Folders of ops/ that are not ops, and names the binding's namespace or the facade already use.
# kiln new-op scaffolds an op into opkiln's op tree (ops/<op>/, ops/facade/, the wrappers' module below); a
# project of another layout writes its ops itself (docs/adding-an-op.md).
OPS_PY = Path("python", "opkiln", "ops.py")
# The op namespace of that tree (torch.ops.NAMESPACE, "NAMESPACE::op"), which the agreement check reads.
NAMESPACE = "opkiln"
RESERVED = frozenset({"common", "facade", "kernels", "opkiln", "ops", "torch", "stable", "cuda", "cpu", "at", "c10",
                      "std"})


# The kinds of op the scaffold knows, each with what `kiln new-op --help` says of it (the CLI's choices).
KINDS: dict[str, str] = {
    "elementwise": "any --schema; a kernel over the first tensor's elements; the wrapper and tests in the schema's "
                   "order (--backward: a backward op to trim)",
    "rowwise": "a row-wise reduction (normalisation-like) on ops/common/row_reduce.h: the op writes its per-row math "
               "(a sum over the last dim, then each element); schema rowwise_schemas, --backward optional",
    "roi": "a member of the (non-position-sensitive) RoI family on ops/common/roi_family.h: the op writes its "
           "per-bin math; schema roi_schemas (--schema adds int sampling_ratio, bool aligned, an int32 index output; "
           "--param the op's own parameters); rois of --box-layout's columns (default torchvision's [K, 5]); "
           "torchvision's RoI signature (input, boxes, output_size, spatial_scale, ...); backward always",
    "ps-roi": "a member of the position-sensitive RoI family on ops/common/ps_roi.h: the op writes its per-bin "
              "math; schema ps_roi_schemas (--schema adds int sampling_ratio); torchvision.ops.ps_roi_*'s "
              "signature; backward always",
}

# The parameters every RoI op of either family takes first (what facade/rois.h checks).
ROI_PARAMS = "Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width"

# The position-sensitive RoI family's schemas (ops/common/ps_roi.h, facade/ps_roi.h): the forward's
# parameters, then its backward's, derived from them, in one place (tests/new_op checks that the
# family's ops register exactly these).
PS_ROI_EXTRA = "int sampling_ratio"  # the one optional parameter the family's binding knows (PsRoiArgs)


def ps_roi_schemas(name: str, sampling_ratio: bool) -> tuple[str, str]:
    """The forward and backward schemas of the family member `name` (with or without sampling_ratio)."""
    params = ROI_PARAMS + (f", {PS_ROI_EXTRA}" if sampling_ratio else "")
    backward_params = params.replace("Tensor input, Tensor rois,", "Tensor grad, Tensor rois, Tensor channel_mapping,")
    return (f"{name}({params}) -> (Tensor, Tensor)",
            f"_{name}_backward({backward_params}, int batch_size, int channels, int height, int width) -> Tensor")


# The RoI family's schemas (ops/common/roi_family.h, facade/roi_family.h), in one place: the forward's
# parameters (the optional ones are RoiFamilyArgs' fields), then the op's own (its Op::Params, "bool
# clockwise"), an int32 index output for an Op::kIndex op, and the backward's parameters derived from
# them (tests/new_op checks that the family's ops register exactly these, and that the Python
# registrations agree with them).
ROI_EXTRAS = ("int sampling_ratio", "bool aligned")


def roi_schemas(name: str, sampling_ratio: bool = False, aligned: bool = False,
                index: str | None = None, params: Sequence[str] = ()) -> tuple[str, str]:
    """The forward and backward schemas of the RoI-family member `name`; index: the name of its int32
    index output (an Op::kIndex op: the element a bin chose), None for none; params: the op's own
    parameters after the family's, as "TYPE NAME" ("bool clockwise")."""
    extras = [p for p, on in zip(ROI_EXTRAS, (sampling_ratio, aligned), strict=True) if on]
    params = ", ".join([ROI_PARAMS, *extras, *params])
    backward_params = params.replace("Tensor input, Tensor rois,",
                                     "Tensor grad, Tensor rois," + (f" Tensor {index}," if index else ""))
    return (f"{name}({params}) -> {'(Tensor, Tensor)' if index else 'Tensor'}",
            f"_{name}_backward({backward_params}, int batch, int channels, int height, int width) -> Tensor")


class NewOpError(ValueError):
    """The name cannot be used (exit 2); nothing was written."""


@dataclass(frozen=True)
class Plan:
    """Every file the op needs: new files and the new text of python/opkiln/ops.py."""

    root: Path
    name: str
    new_files: dict[Path, str]
    ops_py: Path
    ops_py_text: str


# ---------------------------------------------------------------------------- an RoI op's box layout and own parameters
# `--box-layout` / `--box-columns` and `--param NAME:TYPE=DEFAULT` (kind roi): what the op's header
# (Op::kBoxColumns, kBoxLayout, struct Params), its schemas (roi_schemas' params), its binding, wrapper
# and tests are generated from. Checked where they enter: a bad value is a one-line NewOpError.

# The most columns of a roi row and parameters of an op the scaffold writes (every one is an argument of
# roi() or a field the drivers copy to the device).
MAX_BOX_COLUMNS = 16
MAX_PARAMS = 8
BOX_LAYOUTS_FILE = TEMPLATES / "box_layouts.json"
# A column a layout does not give a range for is drawn from this one by the generated test.
DEFAULT_SAMPLE_RANGE = (-2.0, 18.0)
# Names the generated code uses beside a column (roi()'s other parameters) or a parameter (the
# binding's, wrapper's and test's locals and the family's arguments), and macros a GNU-mode compiler
# defines in lower case.
_LAYOUT_RESERVED = frozenset({"g", "round", "r", "acc"})
_CXX_MACROS = frozenset({"linux", "unix", "i386", "assert", "errno", "offsetof", "setjmp", "stdin", "stdout",
                         "stderr", "va_arg", "va_start", "va_end", "major", "minor"})
_PARAM_RESERVED = frozenset({"input", "rois", "boxes", "spatial_scale", "pooled_height", "pooled_width",
                             "output_size", "sampling_ratio", "aligned", "index", "batch", "channels", "height",
                             "width", "shape", "out", "forward", "backward", "params", "self", "ctx", "grad",
                             "grad_input", "grad_index", "inputs", "output", "k_names", "torch", "ops", "nn",
                             "opkiln", "kernels", "facade", "g", "round"})
# The C++ namespaces the generated code names (std::int64_t, opkiln::kernels), which a column or parameter
# of that name would hide.
_NAMESPACES = frozenset({"std", "opkiln", "kernels", "facade", "cuda", "cpu", "at", "c10", "torch", "bilinear",
                         "roi_sampling"})
# nn.Module's own attributes (the op's module stores each parameter as self.NAME).
MODULE_ATTRIBUTES = frozenset(line.strip() for line in (TEMPLATES / "module_attributes.txt").read_text().splitlines()
                              if line.strip() and not line.startswith("#"))
PARAM_TYPES = {"bool": "bool", "int": "std::int64_t", "float": "double"}  # schema type -> Params field type
_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_FLOAT_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


@dataclass(frozen=True)
class BoxLayout:
    """A roi row of an RoI-family op: its columns' names (column 0 the batch index), one example row
    and the range the generated test draws each other column from."""

    columns: tuple[str, ...]
    example: tuple[float, ...]
    ranges: tuple[tuple[float, float], ...]  # per column after the batch index

    @property
    def torchvision(self) -> bool:
        return self.columns == TORCHVISION_COLUMNS

    @property
    def label(self) -> str:
        """The columns as the binding's and the fake impls' messages name them (Op::kBoxLayout)."""
        return ", ".join(["batch index", *self.columns[1:]])


def _layout_of(columns: tuple[str, ...], example: Sequence[float] | None = None,
               samples: dict[str, list[float]] | None = None) -> BoxLayout:
    ranges = tuple((float(lo), float(hi)) for lo, hi in ((samples or {}).get(c, DEFAULT_SAMPLE_RANGE)
                                                         for c in columns[1:]))
    row = tuple(float(v) for v in example) if example is not None else (0.0, *[1.0] * (len(columns) - 1))
    return BoxLayout(columns, row, ranges)


def _named_layouts() -> tuple[dict[str, BoxLayout], dict[str, str]]:
    """box_layouts.json: name -> its layout, and name -> what --help says of it."""
    data = json.loads(BOX_LAYOUTS_FILE.read_text())
    named = {k: v for k, v in data.items() if not k.startswith("_")}
    return ({k: _layout_of(tuple(v["columns"]), v["example"], v.get("samples")) for k, v in named.items()},
            {k: str(v["what"]) for k, v in named.items()})


NAMED_LAYOUTS, LAYOUT_HELP = _named_layouts()
TORCHVISION_COLUMNS = NAMED_LAYOUTS["torchvision"].columns


def _check_column(name: str) -> None:
    if not _NAME_RE.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        raise NewOpError(f"box column {name!r} is not a snake_case name (lower-case letters and digits, words "
                         f"joined by single underscores, starting with a letter)")
    if name in CXX_KEYWORDS or name in _CXX_MACROS or keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise NewOpError(f"box column {name!r} is a C++ or Python keyword or a compiler's macro")
    if name in _LAYOUT_RESERVED or name in _NAMESPACES:
        raise NewOpError(f"box column {name!r} is reserved (roi() takes its geometry and rounding by that name, or "
                         f"a C++ namespace the generated code names)")


def box_layout(layout: str | None = None, columns: str | int | None = None) -> BoxLayout:
    """The box layout `--box-layout LAYOUT --box-columns N` name: LAYOUT a named layout
    (box_layouts.json: torchvision, rotated) or the row's column names, comma-separated, the first
    `batch` (the batch index); N alone: N columns named batch, c1, c2, ... (5: torchvision's); both:
    N must be LAYOUT's count. Neither: torchvision's."""
    count: int | None = None
    if columns is not None:
        text = str(columns).strip()
        if not re.fullmatch(r"[0-9]{1,3}", text) or not 2 <= int(text) <= MAX_BOX_COLUMNS:
            raise NewOpError(f"--box-columns {str(columns)!r} is not a number of columns from 2 to "
                             f"{MAX_BOX_COLUMNS} (the batch index and at least one value)")
        count = int(text)
    if layout is None:
        if count is None or count == len(TORCHVISION_COLUMNS):
            return NAMED_LAYOUTS["torchvision"]
        return _layout_of(("batch", *(f"c{i}" for i in range(1, count))))
    if not isinstance(layout, str) or not layout.isascii() or any(c in layout for c in "\n\r\t\0"):
        raise NewOpError(f"--box-layout {layout!r} must be one line of ASCII")
    named = NAMED_LAYOUTS.get(layout.strip())
    if named is not None:
        found = named
    else:
        names = tuple(c.strip() for c in layout.split(","))
        if len(names) < 2:
            raise NewOpError(f"--box-layout {layout!r} is neither a named layout ({', '.join(NAMED_LAYOUTS)}) nor "
                             f"the row's columns, comma-separated, starting with the batch index: "
                             f"'batch, cx, cy, w, h, angle'")
        if names[0] not in ("batch", "b"):
            raise NewOpError(f"--box-layout {layout!r}: column 0 of a roi row is its batch index; start the "
                             f"layout with 'batch'")
        if len(names) > MAX_BOX_COLUMNS:
            raise NewOpError(f"--box-layout {layout!r} has {len(names)} columns, at most {MAX_BOX_COLUMNS}")
        for name in names:
            _check_column(name)
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise NewOpError(f"--box-layout {layout!r} names column {twice[0]!r} twice")
        found = NAMED_LAYOUTS["torchvision"] if names[1:] == TORCHVISION_COLUMNS[1:] else _layout_of(names)
    if count is not None and count != len(found.columns):
        raise NewOpError(f"--box-columns {count} disagrees with --box-layout {layout!r}, which has "
                         f"{len(found.columns)} columns")
    return found


@dataclass(frozen=True)
class OpParam:
    """One of the op's own parameters (--param NAME:TYPE=DEFAULT): a field of its Op::Params."""

    name: str
    type: str  # bool, int or float (schema and Python)
    default: bool | int | float

    @property
    def schema(self) -> str:
        return f"{self.type} {self.name}"

    @property
    def python_default(self) -> str:
        return repr(self.default)

    @property
    def cxx_default(self) -> str:
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, int):
            return "-9223372036854775807 - 1" if self.default == _INT64[0] else str(self.default)
        return repr(self.default)

    @property
    def sample(self) -> str:
        """The value the generated test passes (a bool: not its default, so both are exercised)."""
        return repr(not self.default) if isinstance(self.default, bool) else self.python_default


def op_param(text: str, taken: Sequence[str] = ()) -> OpParam:
    """--param NAME:TYPE=DEFAULT (TYPE bool, int or float; DEFAULT as Python writes it: False, -1, 0.5)."""
    usage = "NAME:TYPE=DEFAULT, e.g. clockwise:bool=False (TYPE: bool, int or float)"
    if not isinstance(text, str) or not text.isascii() or any(c in text for c in "\n\r\t\0"):
        raise NewOpError(f"--param {text!r} must be one line of ASCII: {usage}")
    m = re.fullmatch(r"\s*([^:=\s]*)\s*:\s*([^=\s]*)\s*(?:=\s*(.*?))?\s*", text)
    if m is None:
        raise NewOpError(f"--param {text!r} is not {usage}")
    name, type_, default = m.groups()
    if not _NAME_RE.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        raise NewOpError(f"--param {text!r}: {name!r} is not a snake_case name (lower-case letters and digits, "
                         f"words joined by single underscores, starting with a letter)")
    if name in CXX_KEYWORDS or name in _CXX_MACROS or keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise NewOpError(f"--param {text!r}: {name!r} is a C++ or Python keyword or a compiler's macro")
    if name in _PARAM_RESERVED or name in _NAMESPACES or name in MODULE_ATTRIBUTES or hasattr(builtins, name):
        raise NewOpError(f"--param {text!r}: {name!r} is reserved (the family's arguments, the generated code's "
                         f"names, C++ namespaces, nn.Module's attributes and Python's builtins)")
    if name in taken:
        raise NewOpError(f"--param {name!r} is given twice")
    if type_ not in PARAM_TYPES:
        raise NewOpError(f"--param {text!r}: type {type_!r} is not bool, int or float")
    if default is None or not default:
        raise NewOpError(f"--param {text!r} needs a default ({name}:{type_}=...): the wrapper's parameters after "
                         f"spatial_scale all have one")
    value: bool | int | float
    if type_ == "bool":
        if default not in ("True", "False"):
            raise NewOpError(f"--param {text!r}: a bool's default is True or False, not {default!r}")
        value = default == "True"
    elif type_ == "int":
        if not re.fullmatch(r"[+-]?[0-9]{1,19}", default) or not _INT64[0] <= int(default) <= _INT64[1]:
            raise NewOpError(f"--param {text!r}: an int's default is a decimal integer in int64's range, "
                             f"not {default!r}")
        value = int(default)
    else:
        value = float(default) if _FLOAT_TEXT.fullmatch(default) else math.nan
        if not math.isfinite(value):
            raise NewOpError(f"--param {text!r}: a float's default is a finite decimal number, not {default!r}")
    return OpParam(name, type_, value)


def op_params(texts: Sequence[str]) -> tuple[OpParam, ...]:
    """Every --param, checked one by one and against each other."""
    if len(texts) > MAX_PARAMS:
        raise NewOpError(f"{len(texts)} --param options; an op takes at most {MAX_PARAMS} of its own")
    found: list[OpParam] = []
    for text in texts:
        found.append(op_param(text, [p.name for p in found]))
    return tuple(found)


def existing_ops(root: Path) -> set[str]:
    """Names of every op in the tree: op folders and the ops their bindings define."""
    names = {p.parent.name for p in (root / "ops").glob("*/binding.cpp")}
    for binding in (root / "ops").glob("*/binding.cpp"):
        names.update(re.findall(r'\bm\.def\(\s*"([A-Za-z_][A-Za-z0-9_]*)', binding.read_text()))
    return names


def _module_names(source: str) -> set[str]:
    """Top-level names a Python module binds (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def validate_name(name: str, root: Path) -> None:
    if not _NAME_RE.fullmatch(name):
        raise NewOpError(f"{name!r} is not a snake_case name (lower-case letters and digits, words joined by "
                         f"single underscores, starting with a letter)")
    if len(name) > MAX_NAME_LENGTH:
        raise NewOpError(f"{name!r} is longer than {MAX_NAME_LENGTH} characters")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise NewOpError(f"{name!r} is a Python keyword")
    if name in CXX_KEYWORDS:
        raise NewOpError(f"{name!r} is a C++ keyword")
    if name in RESERVED:
        raise NewOpError(f"{name!r} is reserved (a folder of ops/ or a namespace the bindings use)")
    if name in existing_ops(root):
        raise NewOpError(f"an op named {name!r} exists already")
    taken = [str(p.relative_to(root)) for p in (root / "ops" / name, root / "tests" / "ops" / f"test_{name}.py")
             if p.exists()]
    if taken:
        raise NewOpError(f"{', '.join(taken)} exists already")
    ops_py = root / OPS_PY
    if name in _module_names(ops_py.read_text()):
        raise NewOpError(f"python/opkiln/ops.py already defines {name!r}")


WIDTH = 120


def _render(template: str, **values: str) -> str:
    return Template((TEMPLATES / template).read_text()).substitute(values)


def _code(line: str, opens: list[int], comments: bool) -> Iterator[tuple[int, str]]:
    """Each character of `line` outside strings and brackets, with its column; `opens` (the columns of the
    open brackets) kept current as it goes. With `comments`, a trailing comment ends the line."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            if c == quote and line[i - 1] != "\\":
                quote = ""
        elif c in "\"'":
            quote = c
        elif comments and (c == "#" or line.startswith("//", i)):
            return
        elif c in "([{":
            opens.append(i)
        elif c in ")]}" and opens:
            opens.pop()
        else:
            yield i, c


def _break_at(line: str, width: int, inside: int | None) -> tuple[int, int] | None:
    """Where to break a too-long line: after the last ", " that fits, at the outermost bracket
    level that has one, and the column the rest continues at (after that bracket); None when
    there is none. `inside`: the column of a bracket opened on an earlier line."""
    opens: list[int] = [] if inside is None else [inside]
    best: tuple[int, int, int] | None = None  # (depth, cut, indent)
    for i, c in _code(line, opens, comments=False):
        if c == "," and opens and line[i + 1:i + 2] == " " and i + 1 < width and \
                (best is None or len(opens) <= best[0]):
            best = (len(opens), i + 1, opens[-1] + 1)
    return None if best is None else (best[1], best[2])


def _open_brackets(line: str, opens: list[int]) -> list[int]:
    """The columns of the brackets still open after `line` (`opens`: those open before it; strings
    and a trailing comment skipped)."""
    opens = list(opens)
    for _ in _code(line, opens, comments=True):
        pass
    return opens


def _wrap(text: str, width: int = WIDTH) -> str:
    """Lines of generated code broken inside their brackets to fit `width` (C++ and Python alike),
    a bracket opened on an earlier line included."""
    out: list[str] = []
    opens: list[int] = []
    for line in text.splitlines():
        inside: int | None = opens[-1] if opens else None
        comment = line.lstrip().startswith(("//", "#"))
        pieces: list[str] = []
        while not comment and len(line) > width and (at := _break_at(line, width, inside)) is not None:
            cut, indent = at
            pieces.append(line[:cut].rstrip())
            line = " " * indent + line[cut:].lstrip()
            inside = indent - 1
        pieces.append(line)
        out.extend(pieces)
        if not line.strip():
            opens = []  # a blank line ends any statement
        elif not comment:
            for piece in pieces:
                opens = _open_brackets(piece, opens)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _cxx_string(text: str, indent: str, width: int = WIDTH) -> str:
    """A C++ string literal of `text`, as adjacent literals that fit `width` after `indent`, split after a
    space where there is one."""
    room = width - len(indent) - 8
    parts: list[str] = []
    while len(text) > room:
        cut = text.rfind(" ", 0, room) + 1 or room
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    return f"\n{indent}".join(f'"{part}"' for part in parts)


def _m_defs(*schemas: str) -> str:
    """The lines of OPKILN_SCHEMAS(m) { ... } that define `schemas`."""
    return "\n".join(f"  m.def({_cxx_string(text, ' ' * 8)});" for text in schemas)


def _lines(items: list[str], indent: str) -> str:
    return "\n".join(indent + item for item in items)


def _fragments(s: Schema, backward: bool) -> dict[str, str]:
    """The pieces of generated code that depend on the schema (argument lists, calls, outputs)."""
    op = s.name
    first = s.tensors[0].name
    outs = list(s.returns)
    cxx_params = [f"const void* {a.name}" if a.is_tensor else f"{CXX_TYPES[a.type]} {a.name}" for a in s.args]
    forward_params = ", ".join(cxx_params + [f"void* {o}" for o in outs])
    unused = [f"  static_cast<void>({a.name});" for a in s.args]
    tuple_type = f"std::tuple<{', '.join('Tensor' for _ in outs)}>"
    members = [f"Tensor {a.name};" for a in s.tensors] + [f"Tensor {o};" for o in outs]
    prepare = [f"as_contiguous({a.name})" for a in s.tensors] + [f"empty_contiguous_like({first})" for _ in outs]
    kernel_args = [f"f.{a.name}.const_data_ptr()" if a.is_tensor else a.name for a in s.args] + \
        [f"f.{o}.mutable_data_ptr()" for o in outs]
    check = [f"ScalarKind check({', '.join(f'const Tensor& {a.name}' for a in s.tensors)}, DeviceType device, "
             f"std::string_view op) {{",
             f'  check_device({first}, device, op, "{first}");',
             f'  const ScalarKind kind = float_kind({first}, op, "{first}");']
    for a in s.tensors[1:]:
        check += [f'  check_same_device({first}, {a.name}, op, "{first}", "{a.name}");',
                  f'  check_same_dtype({first}, {a.name}, op, "{first}", "{a.name}");']
    check += ["  return kind;", "}"]
    py_params = ", ".join(f"{a.name}: {PY_TYPES[a.type]}" for a in s.args)
    py_return = "Tensor" if len(outs) == 1 else f"tuple[{', '.join('Tensor' for _ in outs)}]"
    py_call = ", ".join(a.name if a.is_tensor else f"{a.type}({a.name})" for a in s.args)
    like = f"{first}.new_empty({first}.shape)"
    samples = {"float": "0.5", "int": "2", "bool": "False"}
    sample_values = [f"torch.randn({'first' if a is s.tensors[0] else '2'}, 3, 4, generator=g, "
                     f"dtype=torch.float64).to(device=device, dtype=dtype)" if a.is_tensor else samples[a.type]
                     for a in s.args]
    values = {
        "op": op, "schema": s.text, "first_arg": first, "first_out": outs[0],
        "forward_params": forward_params, "forward_unused": "\n".join(unused),
        "forward_cpu_body": _lines([f"{op}_cpu_core::not_written<T>({o}, begin, end);" for o in outs], "    "),
        "forward_cuda_body": _lines([f"{op}_cu::not_written<T><<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>("
                                     f"static_cast<T*>({o}), n);" for o in outs], "    "),
        "forward_check": "\n".join(check),
        "forward_members": _lines(members, "  "),
        "forward_prepare": ", ".join(prepare),
        "forward_cxx_args": ", ".join(f"{CXX_TYPES[a.type]} {a.name}" for a in s.args),
        "forward_names": ", ".join(a.name for a in s.args),
        "forward_check_names": ", ".join(a.name for a in s.tensors),
        "forward_kernel_args": ", ".join(kernel_args),
        "forward_return": "Tensor" if len(outs) == 1 else tuple_type,
        "forward_result": f"f.{outs[0]}" if len(outs) == 1 else "{" + ", ".join(f"f.{o}" for o in outs) + "}",
        "schemas": f"  m.def({_cxx_string(s.text, '        ')});",
        "cpu_impls": f'  m.impl("{op}", OPKILN_KERNEL({op}_cpu));',
        "cuda_impls": f'  m.impl("{op}", OPKILN_KERNEL({op}_cuda));',
        "backward_decls": "", "backward_cpu": "", "backward_cuda": "", "backward_binding": "",
        "py_params": py_params, "py_return": py_return, "py_call": py_call,
        "fake_result": like if len(outs) == 1 else ", ".join(like for _ in outs),
        "first_result": "" if len(outs) == 1 else "[0]",  # op_smoke calls .tolist() on the result
        "install_sample": ", ".join("torch.ones(2, 3, 4)" if a.is_tensor else samples[a.type] for a in s.args),
        "sample_values": ", ".join(sample_values) + ("," if len(sample_values) == 1 else ""),
        "ref_params": py_params, "ref_return": py_return,
        "ref_result": "result" if len(outs) == 1 else ", ".join(["result"] + ["result.clone()"] * (len(outs) - 1)),
        "backward_tests": _render("test_no_backward.py.tmpl", op=op),
        "opcheck_grads": '[False], ids=["no_grad"]',
    }
    values["autograd"] = _render("autograd_none.py.tmpl", op=op)
    if backward:
        values.update(_backward_fragments(s, values))
    return values


def _backward_fragments(s: Schema, forward: dict[str, str]) -> dict[str, str]:
    """The backward op _NAME_backward(grads of the outputs, the forward's arguments, its outputs)
    -> the gradient of the first tensor argument."""
    op, first, outs = s.name, s.tensors[0].name, list(s.returns)
    grads = [f"grad_{o}" for o in outs]
    bwd_args = [Arg("Tensor", g) for g in grads] + list(s.args) + [Arg("Tensor", o) for o in outs]
    bwd_schema = f"_{op}_backward({', '.join(f'{a.type} {a.name}' for a in bwd_args)}) -> Tensor"
    cxx_params = ", ".join([f"const void* {a.name}" if a.is_tensor else f"{CXX_TYPES[a.type]} {a.name}"
                            for a in bwd_args] + [f"void* grad_{first}"])
    tensors = [a for a in bwd_args if a.is_tensor]
    kernel_args = ", ".join([f"{a.name}_c.const_data_ptr()" if a.is_tensor else a.name for a in bwd_args] +
                            [f"grad_{first}.mutable_data_ptr()"])
    decls = f"""
// The backward: grad_{first} (the gradient of {first}) over work items [begin, end) (the
// skeleton's: its elements), from the gradients of the outputs, the forward's arguments and outputs.
void {op}_backward_cpu(ScalarKind kind, {cxx_params}, std::int64_t begin, std::int64_t end);

// All n work items, on `stream`; 0 or a cudaError_t value.
CudaStatus {op}_backward_cuda(ScalarKind kind, {cxx_params}, std::int64_t n, CudaStream stream);
"""
    unused = "\n".join(f"  static_cast<void>({a.name});" for a in bwd_args)
    cpu = f"""
void {op}_backward_cpu(ScalarKind kind, {cxx_params}, std::int64_t begin, std::int64_t end) {{
{unused}
  cpu::dispatch_float_kinds(static_cast<int>(kind), [&]<typename T>() {{
    {op}_cpu_core::not_written<T>(grad_{first}, begin, end);
  }});
}}
"""
    cuda = f"""
CudaStatus {op}_backward_cuda(ScalarKind kind, {cxx_params}, std::int64_t n, CudaStream stream) {{
{unused}
  if (n == 0) return 0;
  return cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {{
    {op}_cu::not_written<T><<<cuda::grid_for(n), cuda::kThreads, 0, stream>>>(static_cast<T*>(grad_{first}), n);
    return cuda::last_launch_status();
  }});
}}
"""
    cxx_args = ", ".join(f"{CXX_TYPES[a.type]} {a.name}" for a in bwd_args)
    same_device = "\n".join(f'  check_same_device({grads[0]}, {a.name}, kBwd, "{grads[0]}", "{a.name}");'
                            for a in tensors[1:])
    contiguous = "\n".join(f"  const Tensor {a.name}_c = as_contiguous({a.name});" for a in tensors)
    binding = f"""
constexpr std::string_view kBwd = "_{op}_backward";

// The backward's checks (TODO({op}): shapes), its contiguous inputs and the gradient of {first}.
Tensor backward(ScalarKind* kind, {cxx_args}, DeviceType device) {{
  check_device({grads[0]}, device, kBwd, "{grads[0]}");
{same_device}
  *kind = float_kind({grads[0]}, kBwd, "{grads[0]}");
  return empty_contiguous_like({first});
}}

Tensor {op}_backward_cpu({cxx_args}) {{
  ScalarKind kind{{}};
  Tensor grad_{first} = backward(&kind, {", ".join(a.name for a in bwd_args)}, DeviceType::CPU);
{contiguous}
  parallel_for(0, grad_{first}.numel(), 4096, [&](std::int64_t begin, std::int64_t end) {{
    kernels::{op}_backward_cpu(kind, {kernel_args}, begin, end);
  }});
  return grad_{first};
}}

#if OPKILN_WITH_CUDA
Tensor {op}_backward_cuda({cxx_args}) {{
  const DeviceGuard guard({grads[0]});
  ScalarKind kind{{}};
  Tensor grad_{first} = backward(&kind, {", ".join(a.name for a in bwd_args)}, DeviceType::CUDA);
{contiguous}
  check_cuda(kernels::{op}_backward_cuda(kind, {kernel_args}, grad_{first}.numel(), cuda_stream({grads[0]})), kBwd);
  return grad_{first};
}}
#endif
"""
    names = [a.name for a in s.args]
    saved = [a.name for a in s.tensors] + outs
    outputs_unpack = outs[0] if len(outs) == 1 else ", ".join(outs)
    setup_unpack = f"({names[0]},)" if len(names) == 1 else ", ".join(names)
    scalar_names = [a.name for a in s.scalars]
    autograd = _render(
        "autograd_backward.py.tmpl", op=op, first_arg=first,
        bwd_py_params=", ".join(f"{a.name}: {PY_TYPES[a.type]}" for a in bwd_args),
        input_names=setup_unpack,
        saved=", ".join([a.name for a in s.tensors] + [f"*{('(output,)' if len(outs) == 1 else 'output')}"]),
        scalar_tuple=", ".join(scalar_names) + ("," if len(scalar_names) == 1 else ""),
        grad_params=", ".join(f"{g}: Tensor" for g in grads),
        saved_unpack=f"({saved[0]},)" if len(saved) == 1 else ", ".join(saved),
        bwd_call=", ".join(grads + [a.name if a.is_tensor else f"ctx.scalars[{scalar_names.index(a.name)}]"
                                    for a in s.args] + outs),
        grad_returns=", ".join([f"grad_{first}"] + ["None"] * (len(s.args) - 1)) + ("," if len(s.args) == 1 else ""),
    )
    del outputs_unpack
    return {
        "backward_decls": decls, "backward_cpu": cpu, "backward_cuda": cuda, "backward_binding": binding,
        "schemas": forward["schemas"] + f"\n  m.def({_cxx_string(bwd_schema, '        ')});",
        "cpu_impls": forward["cpu_impls"] + f'\n  m.impl("_{op}_backward", OPKILN_KERNEL({op}_backward_cpu));',
        "cuda_impls": forward["cuda_impls"] + f'\n  m.impl("_{op}_backward", OPKILN_KERNEL({op}_backward_cuda));',
        "autograd": autograd,
        "backward_tests": _render("test_backward.py.tmpl", op=op),
        "opcheck_grads": '[False, True], ids=["no_grad", "grad"]',
    }


def _add_to_all(source: str, name: str) -> str:
    match = re.search(r"^__all__ = \[([^\]]*)\]$", source, re.MULTILINE)
    if match is None:
        raise NewOpError("python/opkiln/ops.py has no __all__ = [...] to add the op to")
    names = sorted({*re.findall(r'"([^"]+)"', match.group(1)), name})
    line = _wrap("__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]")
    return source[:match.start()] + line + source[match.end():]


def _add_to_docstring(source: str, s: Schema, backward: bool) -> str:
    """ops.py's docstring lists every op: one more bullet after the last of its "Operators" list."""
    head = re.search(r"^Operators \(.*?\n\n", source, re.MULTILINE | re.DOTALL)
    if head is None:
        raise NewOpError('python/opkiln/ops.py\'s docstring has no "Operators (...):" paragraph to add the op to')
    bullets = re.compile(r"(?:^- .*\n(?:^  .*\n)*)+", re.MULTILINE)
    found = bullets.match(source, head.end())
    if found is None:
        raise NewOpError('python/opkiln/ops.py\'s "Operators" paragraph is not followed by a list of "- " bullets')
    args = ", ".join(a.name for a in s.args)
    grad = (f"autograd here calls the internal ``_{s.name}_backward``; no double backward" if backward
            else "not differentiable")
    words = f"- ``{s.name}({args})``: TODO({s.name}): what it computes; {grad}.".split(" ")
    lines = [words[0]]
    for word in words[1:]:
        if len(lines[-1]) + 1 + len(word) > 100:
            lines.append("  " + word)
        else:
            lines[-1] += " " + word
    bullet = "\n".join(lines) + "\n"
    return source[:found.end()] + bullet + source[found.end():]


def _ps_roi_plan(name: str, root: Path, schema: str | None) -> Plan:
    """A position-sensitive RoI op: its per-bin math skeleton, the family's binding, wrapper and tests."""
    with_sr, without_sr = ps_roi_schemas(name, True)[0], ps_roi_schemas(name, False)[0]
    if schema is not None and " ".join(schema.split()) not in (with_sr, without_sr):
        raise NewOpError(f"a ps-roi op takes the family's schema: {without_sr!r}, or {with_sr!r} (another "
                         f"parameter needs a field of facade/ps_roi.h's PsRoiArgs first)")
    sampling_ratio = schema is not None and "sampling_ratio" in schema
    forward, backward = ps_roi_schemas(name, sampling_ratio)
    pascal, py_class = _pascal(name), torchvision_class_name(name)
    values = {
        "op": name, "pascal": pascal, "py_class": py_class, "schema": forward,
        "schemas": _m_defs(forward, backward),
        "sr_param": ", std::int64_t sampling_ratio" if sampling_ratio else "",
        "sr_value": "sampling_ratio" if sampling_ratio else "-1",
        "sr_py_param": ", sampling_ratio: int = -1" if sampling_ratio else "",
        "sr_py_arg": ", sampling_ratio" if sampling_ratio else "",
        "sr_init_param": ", sampling_ratio: int" if sampling_ratio else "",
        "sr_init_body": "\n        self.sampling_ratio = sampling_ratio" if sampling_ratio else "",
        "sr_self_arg": ", self.sampling_ratio" if sampling_ratio else "",
        "sr_sample": "2," if sampling_ratio else "",
    }
    new_files = _family_files(root, name, FAMILIES["ps-roi"], values)
    ops_py = root / OPS_PY
    parsed = parse_schema(forward, CXX_KEYWORDS)
    text = _add_to_docstring(_add_to_all(_add_to_all(ops_py.read_text(), name), py_class), parsed, True)
    text = text.rstrip("\n") + "\n" + _wrap(_render("ps_roi_ops_section.py.tmpl", **values))
    return Plan(root, name, new_files, ops_py, text)


def _family_schema(text: str) -> Schema:
    """A family's own schema (ours, so trusted: roi_schemas, rowwise_schemas) as a Schema, without
    the restrictions --schema has (a leading underscore, `grad`)."""
    name, rest = text.split("(", 1)
    params, returns = rest.split(") -> ")
    args = tuple(Arg(*p.split()) for p in params.split(", "))
    count = returns.count("Tensor")
    return Schema(name, args, ("out",) if count == 1 else tuple(f"out{i}" for i in range(count)), text)


def _py_params(s: Schema) -> str:
    return ", ".join(f"{a.name}: {PY_TYPES[a.type]}" for a in s.args)


def _cxx_params(s: Schema) -> str:
    return ", ".join(f"{CXX_TYPES[a.type]} {a.name}" for a in s.args)


@dataclass(frozen=True)
class Family:
    """A family's home as the scaffold writes a member on it: the templates' prefix (PREFIX_op.h.tmpl,
    PREFIX_binding.cpp.tmpl, PREFIX_test.py.tmpl), its name in comments, the drivers' CPU and CUDA
    headers and the instantiating macros' prefix."""
    prefix: str
    label: str
    cpu_header: str
    cuda_header: str
    macro: str


FAMILIES = {
    "roi": Family("roi", "RoI family", "common/roi_family_cpu.h", "common/roi_family_cuda.cuh", "OPKILN_ROI_FAMILY_"),
    "ps-roi": Family("ps_roi", "position-sensitive RoI family", "common/ps_roi_cpu.h", "common/ps_roi_cuda.cuh",
                     "OPKILN_PS_ROI_"),
    "rowwise": Family("rowwise", "row-wise family", "common/row_reduce_cpu.h", "common/row_reduce_cuda.cuh",
                      "OPKILN_ROW_REDUCE_"),
}


def _family_files(root: Path, name: str, family: Family, values: dict[str, str],
                  backward_drivers: bool = False) -> dict[Path, str]:
    """A family member's files: NAME.h (its math), NAME_cpu.cpp and NAME_cuda.cu (the family's drivers
    instantiated for it, with the backward's when `backward_drivers`), binding.cpp and its test."""
    folder = root / "ops" / name
    pascal = _pascal(name)
    files = {folder / f"{name}.h": _wrap(_render(f"{family.prefix}_op.h.tmpl", **values))}
    for suffix, device, header in (("cpu.cpp", "CPU", family.cpu_header), ("cuda.cu", "CUDA", family.cuda_header)):
        lines = [f"{family.macro}{device}({pascal});"] + (
            [f"{family.macro}BACKWARD_{device}({pascal});"] if backward_drivers else [])
        files[folder / f"{name}_{suffix}"] = (f"// {name}'s {device} kernels: the {family.label}'s drivers over its "
                                              f'math.\n#include "{name}/{name}.h"\n#include "{header}"\n\n'
                                              + "\n".join(lines) + "\n")
    files[folder / "binding.cpp"] = _wrap(_render(f"{family.prefix}_binding.cpp.tmpl", **values))
    files[root / "tests" / "ops" / f"test_{name}.py"] = _wrap(_render(f"{family.prefix}_test.py.tmpl", **values))
    return files


def _pascal(name: str) -> str:
    return "".join(word.capitalize() for word in name.split("_"))


# torchvision's spelling of these words in its class names (RoI..., PSRoI...), which a scaffolded op's
# nn.Module follows; the C++ per-bin struct keeps the plain _pascal spelling (Roi...).
CLASS_ACRONYMS = {"roi": "RoI", "ps": "PS"}


def torchvision_class_name(name: str) -> str:
    """The nn.Module class of op `name` as torchvision spells its own: roi_max_rotated -> RoIMaxRotated,
    ps_roi_sum -> PSRoISum."""
    return "".join(CLASS_ACRONYMS.get(word, word.capitalize()) for word in name.split("_"))


def _updated_ops_py(root: Path, names: list[str], forward: Schema, backward: bool, section: str) -> str:
    """ops.py with `names` in __all__, a docstring bullet for `forward`, and `section` appended."""
    text = (root / OPS_PY).read_text()
    for n in names:
        text = _add_to_all(text, n)
    text = _add_to_docstring(text, forward, backward)
    return text.rstrip("\n") + "\n" + _wrap(section)


def _roi_variant(name: str, schema: str | None, params: Sequence[str] = ()) -> tuple[bool, bool, str | None]:
    """Which of the family's schemas --schema names: (sampling_ratio, aligned, index name); params: the
    op's own ("bool clockwise", from --param), which the schema must end with."""
    if schema is None:
        return False, False, None
    wanted = " ".join(schema.split())
    for sampling_ratio in (False, True):
        for aligned in (False, True):
            for index in (None, "index"):
                if roi_schemas(name, sampling_ratio, aligned, index, params)[0] == wanted:
                    return sampling_ratio, aligned, index
    raise NewOpError(f"an roi op takes the family's schema: {roi_schemas(name, params=params)[0]!r}, optionally with "
                     f"', int sampling_ratio' and then ', bool aligned' after pooled_width, and '-> (Tensor, Tensor)' "
                     f"for an int32 index output; the op's own parameters come last, each from a --param "
                     f"NAME:TYPE=DEFAULT")


_ROI_GRAD_SCATTER = """
  // The backward through the taps (the family calls these for a kIndex = false op): the bin's
  // gradient, then add(offset, value) into the roi's plane for each tap. TODO($op): the adjoint of fold.
  template <typename Acc>
  OPKILN_HD static Acc grad(const Roi<Acc>& roi, Acc grad_output) {
    static_cast<void>(roi);
    return grad_output * Acc(kNotWritten);
  }

  template <typename Acc, typename Add>
  OPKILN_HD static void scatter(const Tap<Acc>& t, Acc grad, Add&& add) { add(t.offset, grad); }
"""


def _roi_layout_values(name: str, layout: BoxLayout, params: tuple[OpParam, ...]) -> dict[str, str]:
    """The pieces of an RoI op's files that its box layout and own parameters shape."""
    cols, batch = layout.columns, layout.columns[0]
    n = len(cols)
    decls = []
    if not layout.torchvision:
        decls += [f"  // A roi row: [K, {n}] ({layout.label}); roi() takes its values in this order.",
                  f"  static constexpr std::int64_t kBoxColumns = {n};",
                  f'  static constexpr std::string_view kBoxLayout = "{layout.label}";']
    if params:
        decls += (["", "  // The op's own parameters (the schema's after the family's), read as g.params.NAME; the",
                   "  // drivers copy them to the device by value."] if decls else
                  ["  // The op's own parameters (the schema's after the family's), read as g.params.NAME; the",
                   "  // drivers copy them to the device by value."])
        decls += ["  struct Params {", *(f"    {PARAM_TYPES[p.type]} {p.name} = {p.cxx_default};" for p in params),
                  "  };"]
    geometry = "RoiFamilyGeometryWith<Params>" if params else "RoiFamilyGeometry"
    columns_text = ("torchvision's (batch index, x1, y1, x2, y2); another layout (kBoxColumns, kBoxLayout)"
                    if layout.torchvision else "this op's (kBoxColumns, kBoxLayout above); another layout")
    unused = "".join(f"static_cast<void>({c}), " for c in cols[1:]).rstrip(", ")
    params_note = ("" if not params else
                   "\n  // The op's parameters: " + ", ".join(f"g.params.{p.name}" for p in params) + ".")
    width = n - 1
    if layout.torchvision:
        sample_rois = ["    xy = torch.rand(rois, 2, generator=g, dtype=torch.float64) * 20 - 2",
                       "    wh = torch.rand(rois, 2, generator=g, dtype=torch.float64) * 10",
                       "    boxes = torch.cat([b, xy, xy + wh], dim=1)"]
    else:
        lows = ", ".join(repr(lo) for lo, _ in layout.ranges)
        spans = ", ".join(repr(hi - lo) for lo, hi in layout.ranges)
        sample_rois = [f"    # {', '.join(cols[1:])}: each uniform in its range (box_layouts.json's samples)",
                       f"    low = torch.tensor([{lows}], dtype=torch.float64)",
                       f"    span = torch.tensor([{spans}], dtype=torch.float64)",
                       f"    boxes = torch.cat([b, low + torch.rand(rois, {width}, generator=g, dtype=torch.float64) "
                       f"* span], dim=1)"]
    row = [str(int(v)) if v.is_integer() else repr(v) for v in layout.example[:-1]]
    example = ", ".join([*row, repr(float(layout.example[-1]))])  # one float: a float tensor
    boxes = ("``boxes`` a ``[K, 5]`` tensor of rows ``(batch index, x1, y1, x2, y2)`` or a list (or tuple) of "
             "``[L_i, 4]`` tensors, the boxes of image i, in input pixels before ``spatial_scale``;"
             if layout.torchvision else
             f"``boxes`` a ``[K, {n}]`` tensor of rows ``({layout.label})`` or a list (or tuple) of ``[L_i, {width}]`` "
             f"tensors, the rows of image i without the batch index (TODO({name}): what each column is, which "
             f"``spatial_scale`` scales);")
    boxes_doc = textwrap.fill("``input`` is ``[N, C, H, W]``; " + boxes, 116, initial_indent="    ",
                              subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
    sample_doc = textwrap.fill(f'"""input [2, 3, 9, 8] and rois [K, {n}] ({layout.label}): boxes inside, across '
                               f'and outside the plane. TODO({name}): edge cases."""', 116, initial_indent="    ",
                               subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
    return {
        "layout_decls": ("\n" + "\n".join(decls) + "\n") if decls else "",
        "layout_include": "#include <string_view>\n" if not layout.torchvision else "",
        "geometry": geometry, "columns_text": columns_text, "batch_column": batch,
        "roi_columns": ", ".join(f"Acc {c}" for c in cols), "unused_columns": unused, "params_note": params_note,
        "params_arg": (", {" + ", ".join(p.name for p in params) + "}") if params else "",
        "rois_columns": "" if layout.torchvision else f", {n}",
        "layout_check": "" if layout.torchvision else f', {n}, "{layout.label}"',
        "boxes_doc": boxes_doc, "sample_doc": sample_doc, "sample_rois": "\n".join(sample_rois),
        "example_row": example,
    }


def _roi_plan(name: str, root: Path, schema: str | None, layout: BoxLayout | None = None,
              params: tuple[OpParam, ...] = ()) -> Plan:
    """An RoI-family op: its per-bin math skeleton, the family's binding, a wrapper and tests in
    torchvision's RoI signature; every parameter list comes from roi_schemas. layout: its rois' columns
    (torchvision's [K, 5] by default); params: its own parameters after the family's."""
    layout = layout if layout is not None else box_layout()
    if any(p.name == name for p in params):
        raise NewOpError(f"--param {name!r} is the op's own name")
    own = [p.schema for p in params]
    sampling_ratio, aligned, index = _roi_variant(name, schema, own)
    forward_text, backward_text = roi_schemas(name, sampling_ratio, aligned, index, own)
    fwd, bwd = _family_schema(forward_text), _family_schema(backward_text)
    pascal = _pascal(name)
    extras = fwd.args[5:5 + sampling_ratio + aligned]  # after pooled_width: what RoiFamilyArgs takes next
    defaults = {"sampling_ratio": "-1", "aligned": "False", **{p.name: p.python_default for p in params}}
    init_defaults = {"aligned": "False", **{p.name: p.python_default for p in params}}
    samples = {"sampling_ratio": "2", "aligned": "True", **{p.name: p.sample for p in params}}
    every = [*extras, *(Arg(p.type, p.name) for p in params)]  # the wrapper's parameters after spatial_scale
    family_args = "spatial_scale, pooled_height, pooled_width"  # RoiFamilyArgs' fields, in order
    if aligned:
        family_args += f", {'sampling_ratio' if sampling_ratio else '-1'}, aligned"
    elif sampling_ratio:
        family_args += ", sampling_ratio"
    values = {
        "op": name, "pascal": pascal, "py_class": torchvision_class_name(name),
        # the header's comment of the schema, broken between arguments only (a no-break space inside one)
        "schema": textwrap.fill(re.sub(r"(?<=\w) (?=\w)", "\xa0", forward_text), WIDTH, initial_indent="//   ",
                                subsequent_indent="//     ", break_long_words=False,
                                break_on_hyphens=False).removeprefix("//   ").replace("\xa0", " "),
        "index": "true" if index else "false",
        "index_comment": ("The forward writes an int32 index per element (the element chosen, -1: none);\n  // "
                          "the family's backward adds grad there." if index else
                          "No index output: the backward goes through the taps (grad, scatter)."),
        "index_zero": ", index -1" if index else "", "index_finish": " and its index" if index else "",
        "grad_scatter": "" if index else _ROI_GRAD_SCATTER.replace("$op", name),
        "schemas": _m_defs(forward_text, backward_text),
        "index_name": f', "{index}"' if index else "", "index_arg": f"&{index}" if index else "nullptr",
        "forward_return": "std::tuple<Tensor, Tensor>" if index else "Tensor",
        "forward_params": _cxx_params(fwd), "backward_params": _cxx_params(bwd), "family_args": family_args,
        "py_extra_params": "".join(f", {a.name}: {PY_TYPES[a.type]} = {defaults[a.name]}" for a in every),
        "py_extra_args": "".join(f", {a.name}" for a in every),
        "out_type": "tuple[Tensor, Tensor]" if index else "Tensor", "first": "[0]" if index else "",
        "init_params": "".join(f", {a.name}: {PY_TYPES[a.type]}" +
                               (f" = {init_defaults[a.name]}" if a.name in init_defaults else "") for a in every),
        "init_body": "".join(f"\n        self.{a.name} = {a.name}" for a in every),
        "self_args": "".join(f", self.{a.name}" for a in every),
        "repr": "".join(f", {a.name}={{self.{a.name}}}" for a in every),
        "py_indent": " " * len(f"def {name}("),
        "fwd_py_params": _py_params(fwd), "bwd_py_params": _py_params(bwd),
        "fake_result": "input.new_empty(shape), input.new_empty(shape, dtype=torch.int32)" if index
                       else "input.new_empty(shape)",
        "index_fake_check": (f"\n    _check({index}.dtype == torch.int32 and {index}.shape == grad.shape,\n"
                             f"           lambda: \"opkiln::_{name}_backward: {index} must be int32 of grad's shape\")"
                             if index else ""),
        "save_index": ", output[1]" if index else "",
        "mark_index": "\n    ctx.mark_non_differentiable(output[1])" if index else "",
        "grad_params": "grad: Tensor, grad_index: Tensor | None" if index else "grad: Tensor",
        "saved_unpack": f"rois, {index}" if index else "(rois,)", "saved_args": f"rois, {index}" if index else "rois",
        "extra_sample": "(" + ", ".join(samples[a.name] for a in every) + ("," if len(every) == 1 else "") + ")",
        **_roi_layout_values(name, layout, params),
    }
    new_files = _family_files(root, name, FAMILIES["roi"], values)
    text = _updated_ops_py(root, [name, values["py_class"]], fwd, True, _render("roi_ops_section.py.tmpl", **values))
    return Plan(root, name, new_files, root / OPS_PY, text)


# The row-wise family's schemas (ops/common/row_reduce.h), in one place: the forward returns y and the
# per-row statistic it saves; the backward takes what the forward saved after grad and returns the
# gradients of x and weight.
ROWWISE_PARAMS = "Tensor x, Tensor weight, float eps"


def rowwise_schemas(name: str, backward: bool) -> tuple[str, ...]:
    """The forward schema of the row-wise member `name`, and its backward's when it has one."""
    forward = f"{name}({ROWWISE_PARAMS}) -> (Tensor, Tensor)"
    return (forward, f"_{name}_backward(Tensor grad, Tensor x, Tensor weight, Tensor stat) -> (Tensor, Tensor)") \
        if backward else (forward,)


_ROWWISE_BACKWARD_MATH = """
  // The backward (g = dL/dy): the row sums grad_term, grad_row makes a per-row coefficient of that
  // sum, grad_x is dx[c]; dweight[c] is the sum over rows of grad_w. TODO($op): the adjoint of apply.
  template <typename Acc>
  OPKILN_HD static Acc grad_term(Acc g, Acc x, Acc w, Acc stat) {
    static_cast<void>(g), static_cast<void>(x), static_cast<void>(w), static_cast<void>(stat);
    return Acc(0);
  }

  template <typename Acc>
  OPKILN_HD static Acc grad_row(Acc stat, Acc grad_sum, std::int64_t cols) {
    static_cast<void>(stat), static_cast<void>(cols);
    return grad_sum;
  }

  template <typename Acc>
  OPKILN_HD static Acc grad_x(Acc g, Acc x, Acc w, Acc stat, Acc coef) {
    static_cast<void>(g), static_cast<void>(x), static_cast<void>(w), static_cast<void>(stat), static_cast<void>(coef);
    return Acc(kNotWritten);
  }

  template <typename Acc>
  OPKILN_HD static Acc grad_w(Acc g, Acc x, Acc stat) {
    static_cast<void>(g), static_cast<void>(x), static_cast<void>(stat);
    return Acc(kNotWritten);
  }
"""


def _rowwise_plan(name: str, root: Path, schema: str | None, backward: bool) -> Plan:
    """A row-wise reduction op: its per-row math skeleton on common/row_reduce.h, a binding of the
    family's checks, wrapper and tests; every parameter list comes from rowwise_schemas."""
    texts = rowwise_schemas(name, backward)
    if schema is not None and " ".join(schema.split()) != texts[0]:
        raise NewOpError(f"a rowwise op takes the family's schema: {texts[0]!r} (another parameter needs the "
                         f"family's drivers, ops/common/row_reduce.h, to take it first)")
    fwd = _family_schema(texts[0])
    bwd = _family_schema(texts[1]) if backward else None
    pascal = _pascal(name)
    impls = [(name, "forward")] + ([(f"_{name}_backward", "backward")] if backward else [])
    values = {
        "op": name, "pascal": pascal, "schema": texts[0],
        "and_backward": f" and its internal backward opkiln::_{name}_backward" if backward else "",
        "backward_math": _ROWWISE_BACKWARD_MATH.replace("$op", name) if backward else "",
        "backward_binding": _render("rowwise_backward_binding.cpp.tmpl", op=name, pascal=pascal) if backward else "",
        "schemas": _m_defs(*texts),
        **{f"{dev.lower()}_impls": "\n".join(f'  m.impl("{op}", OPKILN_KERNEL({fn}<DeviceType::{dev}>));'
                                             for op, fn in impls) for dev in ("CPU", "CUDA")},
        "fwd_py_params": _py_params(fwd), "bwd_py_params": _py_params(bwd) if bwd else "",
        "opcheck_grads": '[False, True], ids=["no_grad", "grad"]' if backward else '[False], ids=["no_grad"]',
    }
    values["autograd"] = (_render("rowwise_autograd.py.tmpl", **values) if backward
                          else _render("autograd_none.py.tmpl", op=name))
    values["backward_tests"] = _render("rowwise_test_backward.py.tmpl" if backward
                                       else "rowwise_test_no_backward.py.tmpl", op=name)
    new_files = _family_files(root, name, FAMILIES["rowwise"], values, backward)
    text = _updated_ops_py(root, [name], fwd, backward, _render("rowwise_ops_section.py.tmpl", **values))
    return Plan(root, name, new_files, root / OPS_PY, text)


def plan(name: str, root: Path, schema: str | None = None, backward: bool = False, kind: str = "elementwise",
         box_layout_text: str | None = None, box_columns: str | int | None = None,
         params: Sequence[str] = ()) -> Plan:
    """Validates `name` (and `schema`, default NAME(Tensor x) -> Tensor) and renders every file of an op of
    `kind` (KINDS); writes nothing. An roi op also takes its rois' layout (box_layout: --box-layout and
    --box-columns) and its own parameters (--param NAME:TYPE=DEFAULT, op_param)."""
    root = root.resolve()
    if not (root / "ops" / "facade" / "facade.h").is_file() or not (root / OPS_PY).is_file():
        raise NewOpError(f"{root} is not an opkiln checkout (no ops/facade/facade.h or python/opkiln/ops.py)")
    if kind not in KINDS:
        raise NewOpError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    if kind != "roi" and (box_layout_text is not None or box_columns is not None or params):
        raise NewOpError(f"--box-layout, --box-columns and --param are the roi kind's; a {kind} op takes its "
                         f"family's schema")
    layout = box_layout(box_layout_text, box_columns) if kind == "roi" else None
    own = op_params(params) if kind == "roi" else ()
    validate_name(name, root)
    if kind == "ps-roi":
        return _ps_roi_plan(name, root, schema)
    if kind == "roi":
        return _roi_plan(name, root, schema, layout, own)
    if kind == "rowwise":
        return _rowwise_plan(name, root, schema, backward)
    try:
        s = parse_schema(schema, CXX_KEYWORDS) if schema is not None else parse_schema(f"{name}(Tensor x) -> Tensor")
    except SchemaError as exc:
        raise NewOpError(f"bad --schema: {exc}") from exc
    if s.name != name:
        raise NewOpError(f"the schema defines {s.name!r}, not {name!r}")
    values = _fragments(s, backward)
    folder = root / "ops" / name
    new_files = {
        folder / f"{name}.h": _wrap(_render("op.h.tmpl", **values)),
        folder / f"{name}_cpu.cpp": _wrap(_render("op_cpu.cpp.tmpl", **values)),
        folder / f"{name}_cuda.cu": _wrap(_render("op_cuda.cu.tmpl", **values)),
        folder / "binding.cpp": _wrap(_render("binding.cpp.tmpl", **values)),
        root / "tests" / "ops" / f"test_{name}.py": _wrap(_render("test_op.py.tmpl", **values)),
    }
    ops_py = root / OPS_PY
    text = _add_to_docstring(_add_to_all(ops_py.read_text(), name), s, backward)
    text = text.rstrip("\n") + "\n" + _wrap(_render("ops_section.py.tmpl", **values))
    return Plan(root, name, new_files, ops_py, text)


def write(p: Plan) -> list[Path]:
    """Writes the plan, all or nothing; returns the paths written or changed."""
    created: list[Path] = []
    folder = p.root / "ops" / p.name
    original = p.ops_py.read_text()
    try:
        folder.mkdir()
        for path, text in p.new_files.items():
            with path.open("x") as fh:  # never overwrite
                created.append(path)
                fh.write(text)
        tmp = p.ops_py.with_name(p.ops_py.name + ".new-op.tmp")
        tmp.write_text(p.ops_py_text)
        tmp.replace(p.ops_py)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        p.ops_py.with_name(p.ops_py.name + ".new-op.tmp").unlink(missing_ok=True)
        if p.ops_py.read_text() != original:
            p.ops_py.write_text(original)
        raise
    return [*p.new_files, p.ops_py]


# ---------------------------------------------------------------------------- agreement
# An op's schema is written once (its binding's m.def), but its argument list reappears in the C++
# kernel functions registered for it and in python/opkiln/ops.py (fake impls, the autograd formula's
# call of the backward op, its setup). A family kind writes all of them from one function
# (roi_schemas, ps_roi_schemas, rowwise_schemas); an elementwise op's --backward skeleton is trimmed
# by hand. `disagreements` finds where these places no longer agree, for every op of a tree.

_CXX_OF = {"Tensor": "const Tensor&", "float": "double", "int": "std::int64_t", "bool": "bool"}
_MACRO_KERNELS = re.compile(r'\bOPKILN_(?:ROI_FAMILY|PS_ROI|ROI)_KERNELS\(\s*"(\w+)"\s*,\s*"(\w+)"\s*\)')


@dataclass(frozen=True)
class _Def:
    name: str
    args: tuple[tuple[str, str], ...]  # (type, name)
    returns: int


def _defs(binding_text: str) -> list[_Def]:
    """The schemas of a binding's m.def(...) calls (adjacent C++ literals joined)."""
    out = []
    for call in re.findall(r"m\.def\((.*?)\);", binding_text, re.DOTALL):
        text = "".join(re.findall(r'"([^"]*)"', call))
        m = re.fullmatch(r"(\w+)\((.*)\) -> (.*)", text)
        if m is None:
            continue
        args = tuple((p.split()[0], p.split()[-1]) for p in m.group(2).split(",") if p.strip())
        out.append(_Def(m.group(1), args, m.group(3).count("Tensor")))
    return out


def _cxx_function_params(text: str, fn: str) -> list[str] | None:
    """The parameter types of the definition of C++ function `fn` (a template's too) in `text`."""
    m = re.search(rf"^[\w:<>, ]*?\b{re.escape(fn)}\(([^()]*)\)\s*\{{", text, re.MULTILINE)
    if m is None:
        return None
    params = [p.strip() for p in m.group(1).split(",") if p.strip()]
    return [" ".join(p.split()[:-1]).replace(" &", "&") for p in params]


def _kernel_functions(text: str) -> dict[str, set[str]]:
    """op -> the C++ functions the binding registers for it."""
    found: dict[str, set[str]] = {}
    for op, fn in re.findall(r'm\.impl\(\s*"(\w+)"\s*,\s*OPKILN_KERNEL\(\s*([A-Za-z_]\w*)', text):
        found.setdefault(op, set()).add(fn)
    for fwd, bwd in _MACRO_KERNELS.findall(text):
        found.setdefault(fwd, set()).add("forward")
        found.setdefault(bwd, set()).add("backward")
    return found


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _binding_disagreements(root: Path, schemas: dict[str, _Def]) -> list[str]:
    """Fills `schemas` from every binding; the C++ kernel functions whose parameters differ from their op's schema."""
    problems = []
    for binding in sorted((root / "ops").glob("*/binding.cpp")):
        text = binding.read_text()
        defs = _defs(text)
        schemas.update((d.name, d) for d in defs)
        for d in defs:
            for fn in sorted(_kernel_functions(text).get(d.name, ())):
                types = _cxx_function_params(text, fn)
                want = [_CXX_OF.get(t, t) for t, _ in d.args]
                if types is not None and types != want:
                    problems.append(f"{binding.relative_to(root)}: {fn}({', '.join(types)}) is registered for {d.name} "
                                    f"but its schema takes ({', '.join(want)})")
    return problems


def _fake_disagreements(where: str, fn: ast.FunctionDef, schemas: dict[str, _Def]) -> list[str]:
    problems = []
    for deco in fn.decorator_list:
        if not (isinstance(deco, ast.Call) and getattr(deco.func, "id", "") == "_register_fake" and deco.args):
            continue
        op = (_literal(deco.args[0]) or "").removeprefix(f"{NAMESPACE}::")
        d = schemas.get(op)
        if d is None:
            continue
        got, want = [a.arg for a in fn.args.args], [n for _, n in d.args]
        if got != (want if fn.args.vararg is None else want[:len(got)]):
            problems.append(f"{where}:{fn.lineno}: {fn.name}({', '.join(got)}) is the fake impl of {op}, whose schema "
                            f"takes ({', '.join(want)})")
    return problems


def _call_disagreements(where: str, node: ast.Call, schemas: dict[str, _Def]) -> list[str]:
    """torch.ops.opkiln.OP.default(...) with as many arguments as OP's schema (unless some are starred)."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "default" and isinstance(func.value, ast.Attribute)
            and ast.unparse(func.value.value) == f"torch.ops.{NAMESPACE}"):
        return []
    d = schemas.get(func.value.attr)
    if d is None or any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) + len(node.keywords) == \
            len(d.args):
        return []
    return [f"{where}:{node.lineno}: a call of {d.name} passes {len(node.args)} arguments, its schema takes "
            f"{len(d.args)}"]


def _autograd_disagreements(where: str, node: ast.Call, schemas: dict[str, _Def],
                            functions: dict[str, ast.FunctionDef]) -> list[str]:
    """_register_autograd("opkiln::OP", backward, setup_context=setup): backward takes a gradient per output of
    OP and returns one per argument; setup unpacks `inputs` into OP's arguments."""
    if ast.unparse(node.func) not in ("_register_autograd", "torch.library.register_autograd") or len(node.args) < 2:
        return []
    d = schemas.get((_literal(node.args[0]) or "").removeprefix(f"{NAMESPACE}::"))
    backward = functions.get(getattr(node.args[1], "id", ""))
    if d is None or backward is None:
        return []
    problems = []
    grads = backward.args.args[1:]
    if backward.args.vararg is None and len(grads) != d.returns:
        problems.append(f"{where}:{backward.lineno}: {backward.name} takes {len(grads)} output gradients, {d.name} "
                        f"returns {d.returns} tensors")
    for ret in ast.walk(backward):
        if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple) and \
                not any(isinstance(e, ast.Starred) for e in ret.value.elts) and len(ret.value.elts) != len(d.args):
            problems.append(f"{where}:{ret.lineno}: {backward.name} returns {len(ret.value.elts)} gradients, {d.name} "
                            f"takes {len(d.args)} arguments")
    setup_names = [getattr(k.value, "id", "") for k in node.keywords if k.arg == "setup_context"]
    setup = functions.get(setup_names[0]) if setup_names else None
    for assign in ast.walk(setup) if setup is not None else ():
        if isinstance(assign, ast.Assign) and ast.unparse(assign.value) == "inputs" and \
                isinstance(assign.targets[0], ast.Tuple) and len(assign.targets[0].elts) != len(d.args):
            problems.append(f"{where}:{assign.lineno}: {setup_names[0]} unpacks {len(assign.targets[0].elts)} inputs, "
                            f"{d.name} takes {len(d.args)} arguments")
    return problems


def disagreements(root: Path) -> list[str]:
    """Where an op's schema (its binding's m.def) and the places that repeat its arguments disagree:
    the C++ kernel functions registered for it, its fake impl's parameters, calls of it through
    torch.ops.opkiln.OP.default(...), its autograd formula's gradients and its setup's unpacking of
    `inputs`. One line each, 'path: what'."""
    schemas: dict[str, _Def] = {}
    problems = _binding_disagreements(root, schemas)
    tree = ast.parse((root / OPS_PY).read_text())
    where = OPS_PY.as_posix()
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for fn in functions.values():
        problems += _fake_disagreements(where, fn, schemas)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            problems += _call_disagreements(where, node, schemas) + \
                _autograd_disagreements(where, node, schemas, functions)
    return problems
