// ps_roi_align's CPU kernels: the family's drivers over its per-bin math.
#include "ps_roi_align/ps_roi_align.h"
#include "common/ps_roi_cpu.h"

OPKILN_PS_ROI_CPU(PsRoiAlign);
