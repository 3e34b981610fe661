#!/usr/bin/env python3
"""Run torchvision's own test_ops.py with opkiln's detection ops substituted for torchvision's.

    tests/tv_suite/torchvision_suite.py --tests TV_TEST_DIR [--python VENV/bin/python] [--classes PSRoIAlign,...]

TV_TEST_DIR is a checkout of torchvision's test/ folder (test_ops.py, common_utils.py, conftest.py,
optests_failures_dict.json); it is not part of opkiln. The venv must hold torch, torchvision, pytest,
numpy, pillow and an opkiln wheel. The chosen test classes (default: all of CLASSES) run on the CPU
in that venv, under pytest, with this file loaded as a pytest plugin (``-p torchvision_suite``) that,
before test_ops.py is imported:

- replaces the functions and classes of ``torchvision.ops`` (and of the submodules that define and
  use them) by opkiln's: nms, batched_nms, roi_align, RoIAlign, roi_pool, RoIPool, ps_roi_align,
  PSRoIAlign, ps_roi_pool, PSRoIPool, deform_conv2d, DeformConv2d;
- points the opcheck tests that test_ops.py generates (``optests.generate_opcheck_tests``) at the
  ``opkiln`` namespace instead of ``torchvision``, so that they check opkiln's registered ops
  (test_ops.py calls no ``torch.ops.torchvision.<op>`` directly);
- blocks torchvision's own kernels of those ops (CPU, quantized CPU, Meta): reaching one raises and
  is recorded, so a test that runs torchvision's kernel cannot pass, not even one that expects an
  error. Where torchvision's C++ extension does not load at all (a CUDA torchvision wheel beside a
  CPU torch), torchvision is imported without its ops, which proves the same;
- counts, per test, the runs of opkiln's CPU kernels of those ops (each is wrapped in a counter that
  calls the original, so calls from TorchScript, FX, autograd and opcheck count too).

It prints, per class, the tests passed (and of them, how many reached no kernel: checks in Python
before the op, FX tracing), failed, skipped, and documented differences (KNOWN_DIFFERENCES: tests
that fail because opkiln deliberately differs; each must fail, or the list is stale). Exit status:
0 all good; 1 a failure, a pass that reached torchvision's kernel, a stale known difference, or a
selected class with no test run; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Short name -> torchvision's test class.
CLASSES: dict[str, str] = {
    "NMS": "TestNMS",
    "RoIAlign": "TestRoIAlign",
    "RoIPool": "TestRoiPool",
    "PSRoIAlign": "TestPSRoIAlign",
    "PSRoIPool": "TestPSRoIPool",
    "DeformConv": "TestDeformConv",
}

# The names of torchvision.ops that opkiln.ops replaces, and the torchvision submodules that bind them.
SUBSTITUTED = ("nms", "batched_nms", "roi_align", "RoIAlign", "roi_pool", "RoIPool", "ps_roi_align", "PSRoIAlign",
               "ps_roi_pool", "PSRoIPool", "deform_conv2d", "DeformConv2d")
SUBMODULES = ("torchvision.ops", "torchvision.ops.boxes", "torchvision.ops.roi_align", "torchvision.ops.roi_pool",
              "torchvision.ops.ps_roi_align", "torchvision.ops.ps_roi_pool", "torchvision.ops.poolers",
              "torchvision.ops.deform_conv")
# torchvision's registered ops of those families, whose kernels are blocked while the suite runs.
TORCHVISION_OPS = ("nms", "roi_align", "_roi_align_backward", "roi_pool", "_roi_pool_backward", "ps_roi_align",
                   "_ps_roi_align_backward", "ps_roi_pool", "_ps_roi_pool_backward", "deform_conv2d",
                   "_deform_conv2d_backward")
BLOCKED_KEYS = ("CPU", "QuantizedCPU", "Meta")

# Tests (node id pattern, after the file name) that fail because opkiln deliberately differs from
# torchvision (docs/torchvision-compat.md, "What still differs"), and the opcheck tests generated from
# them (test_<util>__<test>). They run; each must fail.
KNOWN_DIFFERENCES: dict[str, str] = {
    r"TestRoIAlign::(\w+__)?test_qroialign\[": "quantized tensors are refused with the dequantize workaround "
                                              "(torchvision has quantized roi_align kernels)",
    r"TestRoIAlign::(\w+__)?test_qroi_align_multiple_images$": "quantized tensors are refused "
                                                               "(NotImplementedError, not torchvision's RuntimeError)",
    r"TestNMS::(\w+__)?test_qnms\[": "quantized tensors are refused with the dequantize workaround "
                                   "(torchvision's qnms computes IoU on the integer values)",
}

RESULTS_ENV = "TORCHVISION_SUITE_RESULTS"
OPCHECK_ENV = "TORCHVISION_SUITE_OPCHECK_ALL"
PLUGIN = "torchvision_suite"


class UsageError(Exception):
    """Bad input: one line, exit status 2."""


# ---------------------------------------------------------------------------- the report (outer process)


@dataclass
class ClassCounts:
    passed: int = 0
    passed_no_kernel: int = 0
    failed: int = 0
    skipped: int = 0
    known_difference: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.known_difference


def class_of(nodeid: str) -> str:
    """``test_ops.py::TestPSRoIAlign::test_forward[...]`` -> ``TestPSRoIAlign``."""
    parts = nodeid.split("::")
    return parts[1] if len(parts) > 2 else ""


def known_difference(nodeid: str, known: Mapping[str, str] = KNOWN_DIFFERENCES) -> str | None:
    """The reason a test is a documented difference, or None."""
    tail = nodeid.split("::", 1)[1] if "::" in nodeid else nodeid
    for pattern, reason in known.items():
        if re.search(pattern, tail):
            return reason
    return None


def classify(records: Mapping[str, Mapping[str, Any]], classes: Sequence[str],
             known: Mapping[str, str] = KNOWN_DIFFERENCES) -> dict[str, ClassCounts]:
    """Per test class (torchvision's names), the counts of the plugin's records.

    A record: outcome ("passed", "failed", "skipped"), opkiln_calls and torchvision_calls (op -> count,
    as the dispatcher saw them), blocked (torchvision kernels reached), message (of a failure or skip).
    """
    counts = {name: ClassCounts() for name in classes}
    for nodeid, record in sorted(records.items()):
        test_class = class_of(nodeid)
        if test_class not in counts:
            continue
        c = counts[test_class]
        outcome = record["outcome"]
        reached = sorted(set(record.get("torchvision_calls", {})) | set(record.get("blocked", [])))
        reason = known_difference(nodeid, known)
        if outcome == "skipped":
            c.skipped += 1
        elif reached and outcome == "passed":
            c.failed += 1
            c.problems.append(f"{nodeid}: passed but reached torchvision's kernel ({', '.join(reached)})")
        elif reason is not None:
            if outcome == "passed":
                c.failed += 1
                c.problems.append(f"{nodeid}: listed as a known difference ({reason}) but passed: update "
                                  "KNOWN_DIFFERENCES")
            else:
                c.known_difference += 1
        elif outcome == "passed":
            c.passed += 1
            if not record.get("opkiln_calls"):
                c.passed_no_kernel += 1
        else:
            c.failed += 1
            c.problems.append(f"{nodeid}: {first_error(record.get('message', ''))}")
    for name, c in counts.items():
        if c.ran == 0:
            c.problems.append(f"{name}: no test of this class ran")
    return counts


def first_error(message: str) -> str:
    """The line of a pytest failure report that says what went wrong."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors or lines or ["failed"])[0][:300]


def render(counts: Mapping[str, ClassCounts], header: str) -> str:
    lines = [header, f"{'class':<16} {'passed':>6} {'(no kernel)':>11} {'failed':>6} {'skipped':>7} "
                     f"{'differs':>7}"]
    total = ClassCounts()
    for name, c in counts.items():
        lines.append(f"{name:<16} {c.passed:>6} {c.passed_no_kernel:>11} {c.failed:>6} {c.skipped:>7} "
                     f"{c.known_difference:>7}")
        for attr in ("passed", "passed_no_kernel", "failed", "skipped", "known_difference"):
            setattr(total, attr, getattr(total, attr) + getattr(c, attr))
    lines.append(f"{'total':<16} {total.passed:>6} {total.passed_no_kernel:>11} {total.failed:>6} "
                 f"{total.skipped:>7} {total.known_difference:>7}")
    problems = [p for c in counts.values() for p in c.problems]
    if problems:
        lines.append("problems:")
        lines.extend(f"  {p}" for p in problems)
    return "\n".join(lines)


def exit_status(counts: Mapping[str, ClassCounts]) -> int:
    return 1 if any(c.problems for c in counts.values()) else 0


def parse_classes(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CLASSES]
    if not names or unknown:
        raise UsageError(f"--classes: unknown {', '.join(unknown) or '(none given)'}; choose from "
                         f"{', '.join(CLASSES)}")
    return [CLASSES[n] for n in dict.fromkeys(names)]


def build_command(python: str, tests: Path, classes: Iterable[str], extra: Sequence[str]) -> list[str]:
    node_ids = [f"{tests / 'test_ops.py'}::{name}" for name in classes]
    return [python, "-m", "pytest", *node_ids, "-p", PLUGIN, "-p", "no:cacheprovider", "-q", "-rN",
            "--disable-warnings", "--tb=line", *extra]


def interpreter(python: str) -> str:
    """The --python to run pytest with, from the tests' folder: a path made absolute against this
    folder but not resolved (a venv's python is a link that must keep its venv); a bare name is
    left to PATH."""
    return str(Path(python).absolute()) if os.sep in python else python


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", required=True, type=Path, help="torchvision's test/ folder (holds test_ops.py)")
    parser.add_argument("--python", default=sys.executable, help="the venv's python (default: this one)")
    parser.add_argument("--classes", default=",".join(CLASSES), help=f"comma-separated, of {', '.join(CLASSES)}")
    parser.add_argument("--json", type=Path, help="also write the per-test records here")
    parser.add_argument("--opcheck-all", action="store_true",
                        help="also generate torch's opcheck tests (test_ops.py's OPTESTS, opkiln namespace) for "
                             "the chosen classes that test_ops.py generates none for (its RoI classes)")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)
    try:
        classes = parse_classes(args.classes)
        tests = args.tests.resolve()
        if not (tests / "test_ops.py").is_file():
            raise UsageError(f"--tests: {args.tests} holds no test_ops.py (give torchvision's test/ folder)")
        if not Path(args.python).is_file() and not _on_path(args.python):
            raise UsageError(f"--python: {args.python} is not an interpreter")
        python = interpreter(args.python)
    except UsageError as e:
        print(f"torchvision_suite: {e}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="tvsuite-") as tmp:
        results = Path(tmp) / "results.json"
        env = dict(os.environ)
        env[RESULTS_ENV] = str(results)
        env[OPCHECK_ENV] = "1" if args.opcheck_all else ""
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), str(tests),
                                             *filter(None, [env.get("PYTHONPATH")])])
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, whatever the machine has
        command = build_command(python, tests, classes, args.pytest_args)
        # pytest's own output (progress, one line per failure) goes to ours as it comes.
        run = subprocess.run(command, env=env, cwd=tests, check=False)
        if run.returncode not in (0, 1) or not results.is_file():
            # 0 and 1 are pytest's "all passed" and "some failed"; anything else stopped the run.
            print(f"torchvision_suite: pytest stopped (exit status {run.returncode}) before it finished; "
                  "see its output above", file=sys.stderr)
            return 1
        data = json.loads(results.read_text())
    if args.json:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    counts = classify(data["records"], classes)
    env_line = ", ".join(f"{k} {v}" for k, v in data["environment"].items())
    print(render(counts, f"torchvision's test_ops.py with opkiln substituted ({env_line})"))
    return exit_status(counts)


def _on_path(name: str) -> bool:
    from shutil import which
    return which(name) is not None


# ---------------------------------------------------------------------------- the pytest plugin (inner process)

_state: dict[str, Any] = {"records": {}, "blocked": [], "environment": {}, "opcheck_generated": set()}


def _import_torchvision() -> str:
    """Import torchvision; where its C++ extension cannot load, without its ops. Returns how its kernels stand."""
    import torch
    import torch.library

    original = torch.library.register_fake

    def tolerant(op: Any, *args: Any, **kwargs: Any) -> Any:
        name = op if isinstance(op, str) else ""
        if name.startswith("torchvision::"):
            try:
                torch._C._dispatch_find_schema_or_throw(name, "")
            except RuntimeError:
                return lambda fn: fn
        return original(op, *args, **kwargs)

    torch.library.register_fake = tolerant
    try:
        import torchvision
    finally:
        torch.library.register_fake = original
    del torchvision
    try:
        torch._C._dispatch_find_schema_or_throw("torchvision::nms", "")
    except RuntimeError:
        return "absent (torchvision's C++ extension does not load here)"
    return "blocked"


def _block(op: str, key: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        _state["blocked"].append(f"torchvision::{op}")
        raise RuntimeError(f"torchvision_suite: torchvision's own kernel torchvision::{op} ({key}) was reached; "
                           "the substitution missed a path")
    return kernel


def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
    """Before torchvision's conftest.py imports torchvision: import it here, then substitute."""
    import warnings

    import torch
    import torch.testing._internal.optests

    optests: Any = torch.testing._internal.optests  # generate_opcheck_tests is not in its __all__
    kernels = _import_torchvision()
    import torchvision

    import opkiln
    import opkiln.ops

    for module_name in SUBMODULES:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in SUBSTITUTED:
            if name in vars(module):
                setattr(module, name, getattr(opkiln.ops, name))
    for name in SUBSTITUTED:  # the proof that the tests' `ops.<name>` is opkiln's
        assert getattr(torchvision.ops, name) is getattr(opkiln.ops, name), name

    if kernels == "blocked":
        library = torch.library.Library("torchvision", "IMPL")  # type: ignore[no-untyped-call]
        _state["library"] = library  # kept alive for the session
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            for op in TORCHVISION_OPS:
                for key in BLOCKED_KEYS:
                    library.impl(op, _block(op, key), key)  # type: ignore[no-untyped-call]

    generate = optests.generate_opcheck_tests

    def generate_for_opkiln(testcase: Any, namespaces: list[str], *args: Any, **kwargs: Any) -> Any:
        namespaces = ["opkiln" if n == "torchvision" else n for n in namespaces]
        _state["opcheck_generated"].add(testcase.__name__)
        return generate(testcase, namespaces, *args, **kwargs)

    optests.generate_opcheck_tests = generate_for_opkiln
    _count_opkiln_kernels(torch)

    info = opkiln.build_info() if hasattr(opkiln, "build_info") else {}
    _state["environment"] = {
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "opkiln": str(info.get("version", getattr(opkiln, "__version__", "?"))),
        "abi": str(info.get("abi_mode", "?")), "torchvision kernels": kernels,
    }


def _count_opkiln_kernels(torch: Any) -> None:
    """Wrap the CPU kernel of each opkiln op of the families (the same names as TORCHVISION_OPS) in a
    counter that calls the original: every run of one, from eager code, TorchScript, FX, autograd or
    opcheck, is counted."""
    import warnings

    library = torch.library.Library("opkiln", "IMPL")
    _state["opkiln_library"] = library  # kept alive for the session
    counts: dict[str, int] = _state.setdefault("opkiln_counts", {})
    for op in TORCHVISION_OPS:
        kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key(f"opkiln::{op}", "CPU")

        def counted(keyset: Any, *args: Any, _kernel: Any = kernel, _op: str = op) -> Any:
            counts[_op] = counts.get(_op, 0) + 1
            return _kernel.call_boxed(keyset, *args)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            library.impl(op, counted, "CPU", with_keyset=True)


def _counted(runtest: Any, nodeid: str) -> Any:
    def run() -> None:
        counts: dict[str, int] = _state["opkiln_counts"]
        before, blocked_before = dict(counts), len(_state["blocked"])
        try:
            runtest()
        finally:
            calls = {op: n - before.get(op, 0) for op, n in counts.items() if n > before.get(op, 0)}
            blocked = _state["blocked"][blocked_before:]
            _state["records"].setdefault(nodeid, {}).update({
                "opkiln_calls": calls,
                "torchvision_calls": {op: blocked.count(op) for op in set(blocked)},
                "blocked": sorted(set(blocked)),
            })
    return run


def pytest_pycollect_makeitem(collector: Any, name: str, obj: Any) -> None:
    """With --opcheck-all: torch's opcheck tests for a chosen class test_ops.py generates none for,
    made as test_ops.py makes TestNMS's (its OPTESTS and failures dict; the opkiln namespace)."""
    import inspect

    if not os.environ.get(OPCHECK_ENV) or not inspect.isclass(obj) or name not in CLASSES.values():
        return None
    if name in _state["opcheck_generated"] or not hasattr(collector, "module"):
        return None
    import torch.testing._internal.optests

    optests: Any = torch.testing._internal.optests
    module = collector.module
    optests.generate_opcheck_tests(
        testcase=obj, namespaces=["opkiln"],
        failures_dict_path=str(Path(module.__file__).with_name("optests_failures_dict.json")),
        additional_decorators={}, test_utils=list(module.OPTESTS))
    return None


def pytest_collection_modifyitems(items: list[Any]) -> None:
    import pytest

    for item in items:
        for marker in ("needs_cuda", "needs_mps"):  # this suite is the CPU's, whatever the conftest does
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=f"{marker}: torchvision_suite runs on the CPU"))
        item.runtest = _counted(item.runtest, item.nodeid)


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call" or (report.when == "setup" and not report.passed):
        record = _state["records"].setdefault(report.nodeid, {})
        record["outcome"] = report.outcome
        if not report.passed:
            if report.skipped and isinstance(report.longrepr, tuple):
                record["message"] = str(report.longrepr[2])
            else:
                record["message"] = str(report.longreprtext)[-2000:]


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        records = {k: v for k, v in _state["records"].items() if "outcome" in v}
        Path(path).write_text(json.dumps({"environment": _state["environment"], "records": records}))


if __name__ == "__main__":
    sys.exit(main())
