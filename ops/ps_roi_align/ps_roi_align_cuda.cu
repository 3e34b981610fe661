// ps_roi_align's CUDA kernels: the family's drivers over its per-bin math.
#include "ps_roi_align/ps_roi_align.h"
#include "common/ps_roi_cuda.cuh"

OPKILN_PS_ROI_CUDA(PsRoiAlign);
