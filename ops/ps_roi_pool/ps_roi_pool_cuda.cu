// ps_roi_pool's CUDA kernels: the family's drivers over its per-bin math.
#include "ps_roi_pool/ps_roi_pool.h"
#include "common/ps_roi_cuda.cuh"

OPKILN_PS_ROI_CUDA(PsRoiPool);
