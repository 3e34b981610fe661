// roi_pool's CPU kernels: the RoI family's drivers over its per-bin math (roi_pool.h).
#include "roi_pool/roi_pool.h"
#include "common/roi_family_cpu.h"

OPKILN_ROI_FAMILY_CPU(RoiPool);
