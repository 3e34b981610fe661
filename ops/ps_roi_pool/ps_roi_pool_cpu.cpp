// ps_roi_pool's CPU kernels: the family's drivers over its per-bin math.
#include "ps_roi_pool/ps_roi_pool.h"
#include "common/ps_roi_cpu.h"

OPKILN_PS_ROI_CPU(PsRoiPool);
