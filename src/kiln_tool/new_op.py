"""`kiln new-op NAME [--kind KIND] [--schema SCHEMA] [--backward]`: the files of a new op, from the templates in
kiln_tool/templates/new_op/, shaped by its kind (KINDS) and schema (kiln_tool/op_schema.py; default
NAME(Tensor x) -> Tensor).

Kinds: "elementwise" (the default: any schema, a kernel over the first tensor's elements, the binding
and wrapper in the schema's order) and "ps-roi" (a member of the position-sensitive RoI family,
ops/common/ps_roi.h: the schema is the family's, ps_roi_schemas, so the wrapper takes
torchvision.ops.ps_roi_*'s signature; the op writes only its per-bin math, the family's drivers,
binding and Python registration do the rest; always with its backward).

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
import keyword
import re
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
RESERVED = frozenset({"common", "facade", "kernels", "opkiln", "ops", "torch", "stable", "cuda", "cpu", "at", "c10",
                      "std"})


KINDS = ("elementwise", "ps-roi")

# The position-sensitive RoI family's schemas (ops/common/ps_roi.h, facade/ps_roi.h): the forward's
# parameters, then its backward's, derived from them, in one place (tests/new_op checks that the
# family's ops register exactly these).
PS_ROI_PARAMS = "Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width"
PS_ROI_EXTRA = "int sampling_ratio"  # the one optional parameter the family's binding knows (PsRoiArgs)


def ps_roi_schemas(name: str, sampling_ratio: bool) -> tuple[str, str]:
    """The forward and backward schemas of the family member `name` (with or without sampling_ratio)."""
    params = PS_ROI_PARAMS + (f", {PS_ROI_EXTRA}" if sampling_ratio else "")
    backward_params = params.replace("Tensor input, Tensor rois,", "Tensor grad, Tensor rois, Tensor channel_mapping,")
    return (f"{name}({params}) -> (Tensor, Tensor)",
            f"_{name}_backward({backward_params}, int batch_size, int channels, int height, int width) -> Tensor")


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


def _break_at(line: str, width: int, inside: int | None) -> tuple[int, int] | None:
    """Where to break a too-long line: after the last ", " that fits, at the outermost bracket
    level that has one, and the column the rest continues at (after that bracket); None when
    there is none. `inside`: the column of a bracket opened on an earlier line."""
    opens: list[int] = [] if inside is None else [inside]
    quote = ""
    best: tuple[int, int, int] | None = None  # (depth, cut, indent)
    for i, c in enumerate(line):
        if quote:
            if c == quote and line[i - 1] != "\\":
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            opens.append(i)
        elif c in ")]}" and opens:
            opens.pop()
        elif c == "," and opens and line[i + 1:i + 2] == " " and i + 1 < width and \
                (best is None or len(opens) <= best[0]):
            best = (len(opens), i + 1, opens[-1] + 1)
    return None if best is None else (best[1], best[2])


def _wrap(text: str, width: int = WIDTH) -> str:
    """Lines of generated code broken inside their brackets to fit `width` (C++ and Python alike)."""
    out: list[str] = []
    for line in text.splitlines():
        inside: int | None = None
        comment = line.lstrip().startswith(("//", "#"))
        while not comment and len(line) > width and (at := _break_at(line, width, inside)) is not None:
            cut, indent = at
            out.append(line[:cut].rstrip())
            line = " " * indent + line[cut:].lstrip()
            inside = indent - 1
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _cxx_string(text: str, indent: str, width: int = WIDTH) -> str:
    """A C++ string literal of `text`, as adjacent literals that fit `width` after `indent`."""
    room = width - len(indent) - 8
    parts = [text[i:i + room] for i in range(0, len(text), room)]
    return f"\n{indent}".join(f'"{part}"' for part in parts)


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
    pascal = "".join(word.capitalize() for word in name.split("_"))
    values = {
        "op": name, "pascal": pascal, "py_class": pascal, "schema": forward,
        "schemas": f"  m.def({_cxx_string(forward, '        ')});\n  m.def({_cxx_string(backward, '        ')});",
        "sr_param": ", std::int64_t sampling_ratio" if sampling_ratio else "",
        "sr_value": "sampling_ratio" if sampling_ratio else "-1",
        "sr_py_param": ", sampling_ratio: int = -1" if sampling_ratio else "",
        "sr_py_arg": ", sampling_ratio" if sampling_ratio else "",
        "sr_init_param": ", sampling_ratio: int" if sampling_ratio else "",
        "sr_init_body": "\n        self.sampling_ratio = sampling_ratio" if sampling_ratio else "",
        "sr_self_arg": ", self.sampling_ratio" if sampling_ratio else "",
        "sr_sample": "2," if sampling_ratio else "",
    }
    folder = root / "ops" / name
    driver = {"cpu.cpp": ("CPU", "common/ps_roi_cpu.h"), "cuda.cu": ("CUDA", "common/ps_roi_cuda.cuh")}
    new_files = {
        folder / f"{name}.h": _wrap(_render("ps_roi_op.h.tmpl", **values)),
        **{folder / f"{name}_{suffix}": (f"// {name}'s {device} kernels: the family's drivers over its per-bin math.\n"
                                         f'#include "{name}/{name}.h"\n#include "{header}"\n\n'
                                         f"OPKILN_PS_ROI_{device}({pascal});\n")
           for suffix, (device, header) in driver.items()},
        folder / "binding.cpp": _wrap(_render("ps_roi_binding.cpp.tmpl", **values)),
        root / "tests" / "ops" / f"test_{name}.py": _wrap(_render("ps_roi_test.py.tmpl", **values)),
    }
    ops_py = root / OPS_PY
    parsed = parse_schema(forward, CXX_KEYWORDS)
    text = _add_to_docstring(_add_to_all(_add_to_all(ops_py.read_text(), name), pascal), parsed, True)
    text = text.rstrip("\n") + "\n" + _wrap(_render("ps_roi_ops_section.py.tmpl", **values))
    return Plan(root, name, new_files, ops_py, text)


def plan(name: str, root: Path, schema: str | None = None, backward: bool = False, kind: str = "elementwise") -> Plan:
    """Validates `name` (and `schema`, default NAME(Tensor x) -> Tensor) and renders every file of an op of
    `kind` (KINDS); writes nothing."""
    root = root.resolve()
    if not (root / "ops" / "facade" / "facade.h").is_file() or not (root / OPS_PY).is_file():
        raise NewOpError(f"{root} is not an opkiln checkout (no ops/facade/facade.h or python/opkiln/ops.py)")
    validate_name(name, root)
    if kind not in KINDS:
        raise NewOpError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    if kind == "ps-roi":
        return _ps_roi_plan(name, root, schema)
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
