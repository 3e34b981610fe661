"""The reference row_center's test gets once its math is written (tests/new_op/test_new_op.py puts this
`reference` in place of the scaffold's)."""

from __future__ import annotations

from torch import Tensor

from support.ops_reference import acc_dtype


def reference(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """(x - the row's mean) * weight, in acc_dtype (ops/row_center/row_center.h)."""
    acc = acc_dtype(x.dtype)
    xa = x.to(acc)
    mean = xa.mean(-1, keepdim=True) if x.shape[-1] else xa.sum(-1, keepdim=True)
    return ((xa - mean) * weight.to(acc)).to(x.dtype)
