/* cp_report_internal.h - context parallelism's traffic formulas, which
 * the cp report (cp_report.c) prints next to the counters and the planner
 * (plan_comm.c) adds up. */
#ifndef PARITY_CP_REPORT_INTERNAL_H
#define PARITY_CP_REPORT_INTERNAL_H

/* Bytes a step of one rank holding n tokens of A attention features in
 * each of `layers` layers, `cores` of which run their attention core
 * again in the backward (recomputation: gpt_recomputed_layers), with its
 * exchange. Ring: the fp32 K and V blocks (kv) and the dK/dV open sums at
 * 8 B an element (open; the data-dependent exception accumulators come on
 * top); Ulysses: the all-to-alls (a2a). */
typedef struct {
    double kv, open, a2a;
} cp_traffic_t;

cp_traffic_t cp_traffic(int cp, int ulysses, double n, double A, double layers, double cores);

#endif
