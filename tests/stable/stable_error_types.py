"""pytest plugin for running tests/ops against a stable-ABI build of opkiln.

The LibTorch stable ABI carries no error types: a stable kernel can only throw
std::runtime_error, and torch reports it as RuntimeError. So where the per-torch
build raises TypeError or ValueError (TORCH_CHECK_TYPE, TORCH_CHECK_VALUE), the
stable build raises RuntimeError with the same message. With this plugin
(``-p stable_error_types``, with tests/stable on PYTHONPATH) an expectation of
TypeError or ValueError also accepts a RuntimeError; the ``match=`` pattern
still has to match. Nothing else changes.
"""

from __future__ import annotations

from typing import Any

import pytest

_ARGUMENT_ERRORS = (TypeError, ValueError)
_original_raises = pytest.raises


def _widen(expected: Any) -> Any:
    types = expected if isinstance(expected, tuple) else (expected,)
    if RuntimeError in types or not any(isinstance(t, type) and issubclass(t, _ARGUMENT_ERRORS) for t in types):
        return expected
    return (*types, RuntimeError)


def _stable_raises(expected_exception: Any, *args: Any, **kwargs: Any) -> Any:
    return _original_raises(_widen(expected_exception), *args, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    del config
    pytest.raises = _stable_raises  # type: ignore[assignment]
