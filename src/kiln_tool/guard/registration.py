"""Register an op's fake (meta) impl and autograd formula at a cost that stays flat as a package's ops grow.

    from ._kiln.registration import register_autograd, register_fake

    @register_fake("mylib::my_op")
    def _(x): return torch.empty_like(x)

    register_autograd("mylib::my_op", backward, setup_context=setup)

The same registrations as torch.library.register_fake and register_autograd, for any kiln-built package's
ops (docs/adding-an-op.md, docs/import-guard.md):

- register_fake fills the fake-impl registry entry torch.library.register_fake fills (and, as it does, the
  Meta kernel), without its per-call caller lookup (inspect reads frames, source and sys.modules: about
  0.2 ms an op at import).
- register_autograd registers the op's Autograd kernel now and builds the kernel torch.library's would have
  built (an autograd.Function and a dataclass: about 0.8 ms an op at import) on the op's first call through
  autograd, once. opcheck, fake tensors, torch.compile and autograd see the same kernels.

Where a torch lacks the registry or the builder (private parts of torch.library), both fall back to the
public calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

_F = TypeVar("_F", bound=Callable[..., Any])
_LIBRARIES: dict[str, torch.library.Library] = {}  # namespace -> its IMPL library, alive with the process


def _library_for(qualname: str) -> torch.library.Library:
    namespace = qualname.partition("::")[0]
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "IMPL")  # type: ignore[no-untyped-call]
    return _LIBRARIES[namespace]


def register_fake(qualname: str) -> Callable[[_F], _F]:
    """A decorator: ``fn`` becomes ``qualname``'s fake impl (torch.library.register_fake's registry entry)."""
    def register(fn: _F) -> _F:
        holder = getattr(torch._library.simple_registry.singleton.find(qualname), "fake_impl", None)
        if holder is None or not hasattr(holder, "register"):
            torch.library.register_fake(qualname, fn, lib=_library_for(qualname))
        else:
            holder.register(fn, f"{fn.__module__}.{fn.__qualname__}", lib=_library_for(qualname))
        return fn
    return register


def register_autograd(qualname: str, backward: Callable[..., Any], *,
                      setup_context: Callable[..., Any] | None = None) -> None:
    """torch.library.register_autograd(qualname, backward, setup_context=...), its kernel built on first use."""
    library_autograd: Any = getattr(torch._library, "autograd", None)
    if not (hasattr(library_autograd, "make_autograd_impl") and hasattr(library_autograd, "Info")):
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=_library_for(qualname))
        return
    built: list[Callable[..., Any]] = []

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if not built:
            op = torch._library.utils.lookup_op(qualname)
            built.append(library_autograd.make_autograd_impl(op, library_autograd.Info(backward, setup_context)))
        return built[0](keyset, *args, **kwargs)

    _library_for(qualname).impl(qualname.partition("::")[2], kernel, "Autograd",  # type: ignore[no-untyped-call]
                                with_keyset=True)
