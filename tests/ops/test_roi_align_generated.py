"""opkiln.roi_align on generated geometry (hypothesis) against the pure-PyTorch reference.

Apart from tests/ops/test_roi_align.py because the stable-ABI test venvs install
pytest only: there this module skips, the example-based tests still run.
"""

from __future__ import annotations

import pytest
import torch

import opkiln
from support.ops_reference import TOL
from support.roi_align_reference import random_rois, roi_align_ref

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    n=st.integers(1, 3), c=st.integers(1, 3), h=st.integers(1, 12), w=st.integers(1, 12), k=st.integers(0, 6),
    ph=st.integers(1, 4), pw=st.integers(1, 4), scale=st.sampled_from([0.25, 0.5, 1.0, 1.5]),
    sampling_ratio=st.integers(-1, 4), aligned=st.booleans(), seed=st.integers(0, 2**16),
)
def test_generated_geometry_matches_reference(n: int, c: int, h: int, w: int, k: int, ph: int, pw: int, scale: float,
                                              sampling_ratio: int, aligned: bool, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64, requires_grad=True)
    rois = random_rois(k, n, h, w, torch.float64, seed=seed, spatial_scale=scale)
    out = opkiln.roi_align(x, rois, (ph, pw), scale, sampling_ratio, aligned)
    ref = roi_align_ref(x, rois, scale, ph, pw, sampling_ratio, aligned)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])
    if k:
        grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
        torch.testing.assert_close(torch.autograd.grad(out, x, grad)[0], torch.autograd.grad(ref, x, grad)[0],
                                   **TOL[torch.float64])
