/* envelope.c - how far from the golden run a correct backend may be.
 *
 * The floor of every envelope is one ulp of the tensor's largest finite
 * golden magnitude (oracle_tensor_ulp): a float backend's sum of n terms
 * is off by a few roundings of its terms, a distance on the tensor's
 * scale, not on a nearly cancelling element's, and an exactly
 * reproducible tensor (spread 0) still gets a scale to count in.
 * Integer tensors (the batch, masks) have no floor: they must be exact.
 */
#include "judge_internal.h"

double judge_tensor_ulp(const st_tensor_t *g, const void *gd) {
    if (g->dtype != ST_F32 && g->dtype != ST_F64) return 0;
    return oracle_tensor_ulp(g->dtype, gd, st_numel(g));
}
