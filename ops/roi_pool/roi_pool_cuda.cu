// roi_pool's CUDA kernels: the RoI family's drivers over its per-bin math (roi_pool.h).
#include "roi_pool/roi_pool.h"
#include "common/roi_family_cuda.cuh"

OPKILN_ROI_FAMILY_CUDA(RoiPool);
