# phases.awk - puts perf's per-symbol percentages ("PCT SYMBOL" lines, from
# `perf report --no-children --sort symbol`) into the golden step's phases
# and prints one line per phase (bench_phases.sh lists what each holds;
# bench_large.sh uses the same split).
  function phase(s) {
    # the portable backend's vector kernel (tile_vec.c): micro_ksum also
    # folds each K tile's partial into the exact sums as it is formed
    if (s ~ /^sgemm_kernel|^sgemm_small_kernel|^sgemm_direct|^micro_/) return "GEMM kernel"
    if (s ~ /^sgemm_.*copy|^sgemm_beta|memset|^sgemm_nn$|^sgemm_nt$|^sgemm_tn$|^cblas_sgemm|^pack_[ab]|^ksum|^tile_vec_gemm/) return "GEMM packing"
    if (s ~ /fold|column_sums|fast_sum|array_sum|store_block|put_|round_fast|xacc|xvec|twosum|acc_add|acc_store|sacc|^contract/) return "exact sums"
    if (s ~ /adamw|clip|grad_norm|step_update|round_grads/) return "optimizer"
    if (s ~ /^coll_|wait_slow|yield_poll/) return "collectives"
    if (s ~ /clear_page|page_fault|do_anonymous_page|do_wp_page/) return "page faults"
    if (s ~ /gelu|expf|softmax|layernorm|linear_|bias|dropout|residual|embedding|crossentropy|ce_row|attention|philox|pm_/) return "elementwise"
    return "other"
  }
  { p[phase($2)] += $1 }
  END {
    n = split("GEMM kernel,GEMM packing,exact sums,elementwise,optimizer,collectives,page faults,other", order, ",")
    for (i = 1; i <= n; i++) printf "  %-14s %5.1f%%\n", order[i], p[order[i]]
  }