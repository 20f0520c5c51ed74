/* broken_needs.h - each negative control's precondition (broken.c's
 * table): NULL where the bug can fire on the layout, else what the layout
 * needs, which `parity check --test-broken NAME` names in its refusal. */
#ifndef PARITY_CLI_BROKEN_NEEDS_H
#define PARITY_CLI_BROKEN_NEEDS_H

#include "broken.h"

const char *needs_dp(const broken_where_t *w);
const char *needs_dp_bf16(const broken_where_t *w);
const char *needs_fp16_scale(const broken_where_t *w);
const char *needs_fp16_resumed(const broken_where_t *w);
const char *needs_tp(const broken_where_t *w);
const char *needs_tp3d(const broken_where_t *w);
const char *needs_tp2d_cp_ring(const broken_where_t *w);
const char *needs_tp2d(const broken_where_t *w);
const char *needs_tp2d_lowp(const broken_where_t *w);
const char *needs_tp_padding(const broken_where_t *w);
const char *needs_pp(const broken_where_t *w);
const char *needs_pp_mask_key(const broken_where_t *w);
const char *needs_pp_tied(const broken_where_t *w);
const char *needs_pp_split(const broken_where_t *w);
const char *needs_pp_split_overlap(const broken_where_t *w);
const char *needs_z3_prefetch(const broken_where_t *w);
const char *needs_cp_ring(const broken_where_t *w);
const char *needs_encdec_dp(const broken_where_t *w);
const char *needs_encdec_copies(const broken_where_t *w, int min_k);
const char *needs_encdec_sum(const broken_where_t *w);
const char *needs_encdec_tied(const broken_where_t *w);
const char *needs_encdec_mean(const broken_where_t *w);
const char *needs_replica(const broken_where_t *w);
const char *needs_moe_dp(const broken_where_t *w);
const char *needs_moe_pooled(const broken_where_t *w, int on);
const char *needs_moe_capacity(const broken_where_t *w);
const char *needs_moe_aux(const broken_where_t *w);
const char *needs_moe_recompute(const broken_where_t *w);
const char *needs_cp_encdec(const broken_where_t *w);
const char *needs_moe_ep(const broken_where_t *w);
const char *needs_moe_sp(const broken_where_t *w);
const char *needs_moe_fold(const broken_where_t *w);
const char *needs_moe_fold_cp(const broken_where_t *w);
const char *needs_moe_router_fp32(const broken_where_t *w);
const char *needs_adam8_zero(const broken_where_t *w);

#endif
