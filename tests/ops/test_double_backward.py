"""The double-backward guards are reached: a gradient of a gradient raises the op's own error.

Each op's backward op registers an autograd formula that raises; autograd calls it only when an
input of the backward op needs a gradient. For an op linear in its input (roi_align), the first
gradient does not depend on the input, so only an output gradient that itself requires grad
reaches the guard: these tests make the output gradient require grad, assert the first gradient
has a graph, and then that the guard's error, not a silent zero, comes back. Run in both ABI
modes (tests/stable runs tests/ops against the stable wheel).
"""

from __future__ import annotations

import pytest
import torch

import opkiln
from support.ops_reference import DEVICES
from support.roi_align_reference import random_rois


def _grad_of_grad(out: torch.Tensor, inp: torch.Tensor) -> None:
    grad_out = torch.randn_like(out).requires_grad_(True)
    (grad_in,) = torch.autograd.grad(out, inp, grad_out, create_graph=True)
    assert grad_in.requires_grad and grad_in.grad_fn is not None, "the guard is unreachable: no graph"
    grad_in.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_double_backward_reaches_the_guard(device: str) -> None:
    x = torch.randn(3, 8, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"opkiln\.rms_norm: double backward .* is not supported"):
        _grad_of_grad(opkiln.rms_norm(x, w, 1e-6), x)


@pytest.mark.parametrize("device", DEVICES)
def test_roi_align_double_backward_reaches_the_guard(device: str) -> None:
    feat = torch.randn(2, 3, 10, 12, dtype=torch.float64, device=device, requires_grad=True)
    rois = random_rois(4, batch=2, height=10, width=12, dtype=torch.float64).to(device)
    with pytest.raises(RuntimeError, match=r"opkiln\.roi_align: double backward .* is not supported"):
        _grad_of_grad(opkiln.roi_align(feat, rois, (3, 3), 1.0, 2, True), feat)
