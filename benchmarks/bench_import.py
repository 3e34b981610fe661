#!/usr/bin/env python3
"""Time `import <package>` on top of an already imported torch, in fresh processes.

    python benchmarks/bench_import.py [--runs 25] [--python PATH] [--package NAME] [--json PATH]

Each run is a new interpreter that imports torch first (not timed), then times
`import <package>` alone with perf_counter: the cost users pay for the ops, kiln's
import guard included (its build-info read, preflight, library load and the proof
that every op is registered). The guard's own overhead is at most this figure. The
figure is the median over the runs, with its share of `import torch` in the same process
and the cost of one more op (SLOPE_PROBE, generated ops). Target (issue 44): at most 10 ms
at idle and a flat cost per op, for opkiln and for any kiln-built package (e.g. the
adopters' ringops and twinlibs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TARGET_MS = 10.0
PROBE = (
    "import importlib, sys, time\n"
    "tt = time.perf_counter()\n"
    "import torch\n"
    "t0, c0 = time.perf_counter(), time.process_time()\n"
    "module = importlib.import_module(sys.argv[1])\n"
    "t1, c1 = time.perf_counter(), time.process_time()\n"
    "print(f'{(t1 - t0) * 1e3:.4f} {(c1 - c0) * 1e3:.4f} {(t0 - tt) * 1e3:.4f}',"
    " getattr(module, '__version__', None) or '-')\n"
)

# The cost of one more op, measured with generated ops after the package is imported: N ops defined in a fresh
# namespace (schema, a CPU kernel), each registered through kiln's generated <package>/_kiln/registration.py
# (register_fake, register_autograd; torch.library's public calls for a package without it), a torch.fx.wrap-ped
# wrapper, then kiln's import guard's proof that every op of a manifest of N is registered (guard.missing_ops).
# Printed: the CPU ms of the registrations for 6 ops and for 60 ops; the slope is their difference / 54.
SLOPE_PROBE = (
    "import importlib, sys, time, torch, torch.fx\n"
    "name = sys.argv[1]\n"
    "module = importlib.import_module(name)\n"
    "try:\n"
    "    helpers = importlib.import_module(name + '._kiln.registration')\n"
    "    fake, autograd = helpers.register_fake, helpers.register_autograd\n"
    "except ImportError:\n"
    "    fake, autograd = (lambda q: torch.library.register_fake(q)), torch.library.register_autograd\n"
    "try:\n"
    "    missing_ops = importlib.import_module(name + '._kiln.loader').missing_ops\n"
    "except ImportError:\n"
    "    missing_ops = lambda manifest: []\n"
    "def kernel(x, alpha): return x * alpha\n"
    "def meta(x, alpha): return torch.empty_like(x)\n"
    "def setup(ctx, inputs, output): ctx.alpha = inputs[1]\n"
    "def backward(ctx, grad): return grad * ctx.alpha, None\n"
    "keep, cost = [], []\n"
    "for namespace, count in (('kiln_bench_small', 6), ('kiln_bench_large', 60)):\n"  # top level: torch.fx.wrap
    "    lib = torch.library.Library(namespace, 'DEF')\n"
    "    keep.append(lib)\n"
    "    names = [f'{namespace}::op{i}' for i in range(count)]\n"
    "    t0 = time.process_time()\n"
    "    for q in names:\n"
    "        op = q.partition('::')[2]\n"
    "        lib.define(op + '(Tensor x, float alpha) -> Tensor')\n"
    "        lib.impl(op, kernel, 'CPU')\n"
    "        fake(q)(meta)\n"
    "        autograd(q, backward, setup_context=setup)\n"
    "        def wrapper(x, alpha, _op=getattr(getattr(torch.ops, namespace), op).default): return _op(x, alpha)\n"
    "        wrapper.__name__ = op\n"
    "        globals()[op] = wrapper\n"
    "        torch.fx.wrap(op)\n"
    "    assert not missing_ops(names)\n"
    "    cost.append((time.process_time() - t0) * 1e3)\n"
    "small, large = cost\n"
    "x = torch.ones(3, requires_grad=True)\n"
    "torch.ops.kiln_bench_large.op59(x, 2.0).sum().backward()\n"
    "assert x.grad is not None and float(x.grad[0]) == 2.0\n"
    "print(f'{small:.4f} {large:.4f}')\n"
)

# The guard alone: its modules, the preflight, the library loads and the op proof (guard.load), without the rest
# of the package's __init__ (its Python ops, fake kernels...). The package is entered as an empty module on its
# own folder, so `<package>._kiln` imports without running __init__.py. Skipped for a package without a guard.
GUARD_PROBE = (
    "import importlib.util, sys, time, types, torch\n"
    "name = sys.argv[1]\n"
    "spec = importlib.util.find_spec(name)\n"
    "package = types.ModuleType(name); package.__path__ = list(spec.submodule_search_locations)\n"
    "sys.modules[name] = package\n"
    "if importlib.util.find_spec(name + '._kiln') is None: print('- -'); raise SystemExit\n"
    "t0, c0 = time.perf_counter(), time.process_time()\n"
    "importlib.import_module(name + '._kiln.guard').load(name)\n"
    "t1, c1 = time.perf_counter(), time.process_time()\n"
    "print(f'{(t1 - t0) * 1e3:.4f} {(c1 - c0) * 1e3:.4f}')\n"
)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch and the package installed")
    parser.add_argument("--package", default="opkiln", help="the kiln-built package to import (default: opkiln)")
    parser.add_argument("--slope-runs", type=int, default=5, help="processes that measure the cost per added op "
                        "(generated ops; 0: skip)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if args.runs < 20:
        parser.error("--runs must be at least 20")
    # The runs start in / (no checkout on sys.path): a relative interpreter path is resolved here first.
    python = os.path.abspath(args.python) if os.sep in args.python else args.python
    # As pip installs it: byte-compiled. One untimed run writes the .pyc files a --no-compile install (or a
    # copied-in guard) lacks; PYTHONDONTWRITEBYTECODE would otherwise time the compiler on every run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([python, "-c", PROBE, args.package], capture_output=True, text=True, cwd="/", env=env)
    samples: list[float] = []
    cpu: list[float] = []  # CPU time of the import: what it costs when the machine is shared
    guard: list[float] = []  # the guard alone (GUARD_PROBE), wall and CPU
    guard_cpu: list[float] = []
    shares: list[float] = []  # the import's time over `import torch`'s, in the same process
    slopes: list[float] = []  # CPU ms per added op (SLOPE_PROBE)
    version = ""
    for _ in range(args.runs):
        proc = subprocess.run([python, "-c", PROBE, args.package], capture_output=True, text=True, cwd="/", env=env)
        if proc.returncode != 0:
            print(f"import failed:\n{proc.stderr}", file=sys.stderr)
            return 2
        ms, cpu_ms, torch_ms, version = proc.stdout.split()
        samples.append(float(ms))
        shares.append(float(ms) / float(torch_ms))
        cpu.append(float(cpu_ms))
        proc = subprocess.run([python, "-c", GUARD_PROBE, args.package], capture_output=True, text=True, cwd="/",
                              env=env)
        if proc.returncode != 0:
            print(f"the guard alone failed:\n{proc.stderr}", file=sys.stderr)
            return 2
        if not proc.stdout.startswith("-"):
            ms, cpu_ms = proc.stdout.split()
            guard.append(float(ms))
            guard_cpu.append(float(cpu_ms))
        if len(slopes) < args.slope_runs:
            proc = subprocess.run([python, "-c", SLOPE_PROBE, args.package], capture_output=True, text=True,
                                  cwd="/", env=env)
            if proc.returncode != 0:
                print(f"the per-op probe failed:\n{proc.stderr}", file=sys.stderr)
                return 2
            small, large = (float(v) for v in proc.stdout.split())
            slopes.append((large - small) / 54)
    median = statistics.median(samples)
    cpu_median = statistics.median(cpu)
    result = {"benchmark": "import", "package": args.package, "version": version, "runs": args.runs,
              "median_ms": round(median, 3),
              "min_ms": round(min(samples), 3), "max_ms": round(max(samples), 3), "target_ms": TARGET_MS,
              "cpu_median_ms": round(cpu_median, 3), "load_1min": os.getloadavg()[0],
              "guard_median_ms": _median(guard), "guard_cpu_median_ms": _median(guard_cpu),
              "share_of_torch_import": round(statistics.median(shares), 5),
              "per_op_cpu_ms": _median(slopes), "per_op_runs": len(slopes),
              "meets_target": median <= TARGET_MS}
    print(f"import {args.package} after torch (kiln's import guard included): median {median:.2f} ms over "
          f"{args.runs} fresh processes "
          f"(min {min(samples):.2f}, max {max(samples):.2f}); target <= {TARGET_MS:.0f} ms: "
          f"{'met' if result['meets_target'] else 'MISSED'}; CPU time median {cpu_median:.2f} ms "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"  share of `import torch` in the same process: median {100 * result['share_of_torch_import']:.2f}%")
    if slopes:
        print(f"  one more op (generated ops, 6 then 60, registered through the package's _kiln/registration.py, and "
              f"the guard's proof): median {result['per_op_cpu_ms']:.3f} CPU ms per op over {len(slopes)} processes")
    if guard:
        print(f"  kiln's import guard alone (guard.load: its modules, preflight, library loads, op proof): median "
              f"{result['guard_median_ms']:.2f} ms, CPU time median {result['guard_cpu_median_ms']:.2f} ms")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
