// roi_align's CUDA kernels: the RoI family's drivers over its per-bin math (roi_align.h).
#include "roi_align/roi_align.h"
#include "common/roi_family_cuda.cuh"

OPKILN_ROI_FAMILY_CUDA(RoiAlign);
