// roi_align's CPU kernels: the RoI family's drivers over its per-bin math (roi_align.h).
#include "roi_align/roi_align.h"
#include "common/roi_family_cpu.h"

OPKILN_ROI_FAMILY_CPU(RoiAlign);
