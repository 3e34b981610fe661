"""opkiln.deform_conv2d on generated geometry (hypothesis) against the pure-PyTorch reference.

Apart from tests/ops/test_deform_conv2d.py because the stable-ABI test venvs and cibuildwheel's test step
install pytest only: there this module skips, the example-based tests still run.
"""

from __future__ import annotations

import pytest
import torch

from opkiln import ops
from support.deform_conv2d_reference import deform_conv2d_ref, random_args, run_with_grads
from support.ops_reference import TOL

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(n=st.integers(0, 2), groups=st.sampled_from([1, 2]), offset_groups=st.sampled_from([1, 2]),
                  size=st.tuples(st.integers(1, 7), st.integers(1, 7)),
                  kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
                  stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
                  padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
                  dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), use_mask=st.booleans(),
                  seed=st.integers(0, 99))
def test_random_geometry_matches_reference(n: int, groups: int, offset_groups: int, size: tuple[int, int],
                                           kernel: tuple[int, int], stride: tuple[int, int],
                                           padding: tuple[int, int], dilation: tuple[int, int], use_mask: bool,
                                           seed: int) -> None:
    (h, w), (kh, kw) = size, kernel
    oh = (h + 2 * padding[0] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (w + 2 * padding[1] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    hypothesis.assume(oh > 0 and ow > 0)  # "Calculated output size too small": test_offset_of_a_wrong_shape...
    a = random_args(n, 4, h, w, 2, kernel, groups, offset_groups, stride, padding, dilation, seed=seed)
    out, grads = run_with_grads(ops.deform_conv2d, a, use_mask, True)
    expected, expected_grads = run_with_grads(deform_conv2d_ref, a, use_mask, True)
    torch.testing.assert_close(out, expected, **TOL[torch.float64])
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
