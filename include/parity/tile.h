/* tile.h - the one GEMM kernel every contraction is built from (DESIGN.md I1, I5).
 *
 * A tile call computes ONE canonical tile of a matrix product in fp32. The
 * model fixes the tile shapes; a layout only decides where and when each
 * tile runs, and tile partials along K are summed exactly elsewhere (xacc.h).
 * So the only promise this kernel must keep is: the same tile shape, with
 * the same transposition, gives the same bits whatever the leading
 * dimensions, the buffer alignment or the calling thread.
 *
 * Two backends compute a tile:
 *
 *   TILE_BACKEND_OPENBLAS  cblas_sgemm from OpenBLAS's pthread build, pinned
 *                          to one thread. Fast; its bits depend on the CPU
 *                          kernel (Haswell vs SkylakeX give different bits),
 *                          so they are reproducible on one machine only.
 *                          tile_init checks at start-up that this machine's
 *                          OpenBLAS is tile-invariant and refuses it if not.
 *   TILE_BACKEND_PORTABLE  a strict-IEEE C loop with one fixed order: every
 *                          element is
 *                              acc = 0.0f; for k = 0..K-1: acc = acc + a_k*b_k
 *                          in fp32, k ascending, each product rounded before
 *                          the add (no FMA: -ffp-contract=off). This is fully
 *                          specified by IEEE 754, so the bits are the same on
 *                          every IEEE machine, compiler and optimisation
 *                          level (except a NaN's sign and payload, which
 *                          IEEE leaves open). golden/ is recorded with it.
 *
 * The two backends round differently, so they agree only within the usual
 * forward-error bound of a length-K dot product. Each result c^ satisfies
 * |c^ - c| <= gamma_K * S with S = sum_k |a_ik||b_kj| and
 * gamma_K = K u / (1 - K u), u = 2^-24 (FMA and blocked sums only make it
 * smaller), so two results differ by at most 2 gamma_K S, which is
 * K 2^-23 S to first order. tile_backend_tolerance() returns twice that
 * (covering the (1 - K u) term for any K < 2^22) plus K subnormal steps for
 * gradual underflow; tests/unit/test_tile.c checks it on random tiles.
 *
 * Thread safety: call tile_init() once per process before any device thread
 * runs a kernel. After that the tile_gemm_* functions may be called from any
 * number of threads at once. tile_set_backend() is global (an atomic): flip
 * it only while no kernels are running, or some tiles use the old backend.
 */
#ifndef PARITY_TILE_H
#define PARITY_TILE_H

#include "parity/error.h"

typedef enum { TILE_BACKEND_OPENBLAS = 0, TILE_BACKEND_PORTABLE = 1 } tile_backend_t;

/* Once per process, before any device thread calls a kernel:
 *   - pins OpenBLAS to one thread (openblas_set_num_threads(1)): each device
 *     thread is one simulated device and owns its core's worth of work;
 *   - checks that OpenBLAS is the pthread build (openblas_get_parallel() == 1),
 *     because Debian's serial build corrupts results when several threads
 *     call it at once;
 *   - runs the tile-invariance self-check on this machine: the same tiles
 *     with different leading dimensions and alignments must give the same
 *     bits, for NN, NT and TN;
 *   - selects the backend from the environment variable PARITY_BACKEND:
 *     "openblas" (the default when unset or empty) or "portable".
 * Fails (returns -1, message in err) on an unknown PARITY_BACKEND value, or
 * when PARITY_BACKEND selects openblas and one of the OpenBLAS checks fails;
 * the message then suggests PARITY_BACKEND=portable. When portable is
 * selected, a failed OpenBLAS check only makes tile_set_backend(OPENBLAS)
 * fatal later. Idempotent and thread-safe: after the first success, later
 * calls return 0 at once (and do not re-read the environment); after a
 * failure, the next call tries again. */
int tile_init(perr_t *err);

/* Reads PARITY_BACKEND and selects the backend it names, exactly as
 * tile_init does (returns -1 naming the variable and the accepted values).
 * tile_init must have succeeded first. For tests and tools that change the
 * variable after start-up. */
int tile_select_backend_from_env(perr_t *err);

/* Global; tests switch it. Fatal if tile_init has not succeeded yet, or if
 * b is OPENBLAS and OpenBLAS failed its start-up checks. */
void tile_set_backend(tile_backend_t b);
tile_backend_t tile_get_backend(void);
/* "openblas" or "portable" (the PARITY_BACKEND spellings). */
const char *tile_backend_name(tile_backend_t b);

/* Row-major, C is overwritten (beta = 0); lda, ldb, ldc are row strides in
 * floats:
 *   nn: C[M,N] = A[M,K]   . B[K,N]     lda >= K, ldb >= N, ldc >= N
 *   nt: C[M,N] = A[M,K]   . B[N,K]^T   lda >= K, ldb >= K, ldc >= N
 *   tn: C[M,N] = A[K,M]^T . B[K,N]     lda >= M, ldb >= N, ldc >= N
 * K == 0 gives C = +0. Negative sizes or a leading dimension below its
 * minimum are caller bugs: fatal, with a message naming the argument.
 * C must not overlap A or B. Dispatch to the selected backend; fatal if
 * tile_init has not succeeded. */
void tile_gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                  float *C, int ldc);
void tile_gemm_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                  float *C, int ldc);
void tile_gemm_tn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                  float *C, int ldc);

/* The forms of a product, for calls that name one (tile_gemm_tiles). */
typedef enum { TILE_NN, TILE_NT, TILE_TN } tile_form_t;

/* All the canonical tiles of one block of a product in one go: C[M,N],
 * M a multiple of tm and N of tn, where every tm x tn tile is bit for bit
 * what tile_gemm_<form>(tm, tn, K, ...) gives for that tile alone. A and
 * B point at the block's origin, with the same shapes as
 * tile_gemm_<form>(M, N, K, ...).
 *
 * Why: OpenBLAS packs both operands on every call, so a call per tile
 * packs each row strip of A once per tile column and each column strip
 * of B once per tile row. One call over the block packs each once. A
 * wide call gives the tiles' bits when OpenBLAS runs the same kernel, in
 * the same order along K, for the block as for one tile; it picks its
 * kernels by size, so that is checked on this machine, on random data,
 * the first time each (form, tm, tn, K, M, N) is used, and a shape whose
 * wide call differs in any bit is computed tile by tile ever after. The
 * portable backend's order does not depend on M or N, so its wide call
 * is always the tiles' bits. Thread-safe like the tile_gemm_* calls. */
void tile_gemm_tiles(tile_form_t form, int tm, int tn, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float *C, int ldc);

/* Block shapes checked so far: how many run as one call (*wide) and how
 * many failed the check and run tile by tile (*narrow). */
void tile_wide_counts(int *wide, int *narrow);

/* A block's products over two K tiles, summed and rounded once, in two
 * OpenBLAS calls: C = the block's tiles for K tile 0 (A0, B0), then
 * C += those for K tile 1 (A1, B1) with beta = 1. IEEE's fp32 addition is
 * the exact sum rounded once, so when the second call forms each tile's
 * partial as the canonical call does and adds it to C with one rounding,
 * every element has the bits of folding its two canonical partials
 * (contract.h), without writing the second partials out and reading both
 * back. That is checked like tile_gemm_tiles, on random data, the first
 * time each (form, tm, tn, K, M, N) is used. Returns 0 when done; -1,
 * with C untouched, where the check failed, for blocks above the check's
 * size, and on the portable backend without its vector kernel
 * (tile_vec_available() 0, or K > TILE_VEC_ADD_MAX_K): the caller then
 * folds the partials itself. The portable backend's vector kernel needs
 * no check: its order forms each whole partial before the one addition. What fp32 addition does unlike the fold is the
 * caller's to mend: -0 + -0 is -0 (an exact zero sum is +0), and
 * infinities and NaNs follow the hardware's rules, not the
 * superaccumulator's. Thread-safe like tile_gemm_tiles. */
int tile_gemm_tiles_pair(tile_form_t form, int tm, int tn, int M, int N, int K,
                         const float *A0, const float *A1, int lda, const float *B0,
                         const float *B1, int ldb, float *C, int ldc);

/* Block shapes checked for tile_gemm_tiles_pair: how many take its two
 * calls (*pair) and how many failed and are folded (*folded). */
void tile_pair_counts(int *pair, int *folded);

/* The portable backend called directly (tests, the -O0/-O2 check): needs no
 * tile_init and touches no global state. Same contract as above. */
void tile_portable_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc);
void tile_portable_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc);
void tile_portable_tn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc);

/* The portable backend's order, eight lanes wide (tile_vec.c): the same
 * bits as tile_portable_<form> on every shape and input, at about
 * OpenBLAS's speed where the CPU has separate multiply and add pipes.
 * tile_vec_available() is 1 where this CPU and build run it (x86-64 with
 * AVX2); the portable backend then uses it for every call. With add = 0,
 * C = the product (as tile_portable_<form>); with add = 1, C = C + the
 * product, one fp32 addition per element of the whole partial (the exact
 * sum of the two, rounded once), which needs K <= TILE_VEC_ADD_MAX_K.
 * Fatal where tile_vec_available() is 0. Needs no tile_init. */
enum { TILE_VEC_ADD_MAX_K = 512 };
int tile_vec_available(void);
void tile_vec_gemm(tile_form_t form, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float *C, int ldc, int add);

/* The exact sums over K tiles of a block, in the vector kernel: for every
 * element of C[M,N], the K/tk K-tile partials (each the portable order
 * over its tk values of k, as tile_gemm_<form>(.., tk, ..) gives it)
 * added in fp64, every addition checked exact by its TwoSum error (as
 * fold.h). S[i*lds + j] = the sum; out[i*ldo + j] = (float) of it too
 * when out is not NULL. bad[(i / TILE_VEC_MR) * ceil(N / TILE_VEC_NR) +
 * j / TILE_VEC_NR] = 1 where some addition in that register block was
 * not exact, or met an infinity or a NaN: those sums (and outputs) are
 * not the exact ones and must be recomputed; 0 elsewhere. work holds
 * tile_vec_ksum_work(M, tk) floats (A packed for the kernel). K a
 * positive multiple of tk. Returns 0; -1 with nothing written where tk
 * is above TILE_VEC_ADD_MAX_K or tile_vec_available() is 0. */
enum { TILE_VEC_MR = 6, TILE_VEC_NR = 16 };
int tile_vec_ksum(tile_form_t form, int M, int N, int K, int tk, const float *A, int lda,
                  const float *B, int ldb, double *S, int lds, float *out, int ldo,
                  unsigned char *bad, float *work);
size_t tile_vec_ksum_work(int M, int tk);

/* The same sums from A packed once (tile_vec_pack_a, into
 * tile_vec_pack_a_size(M, K) floats), for callers that use the same rows
 * of A with several blocks of B's columns; work holds
 * tile_vec_ksum_panel_work(K, tk) floats (B's panel, any alignment). */
size_t tile_vec_pack_a_size(int M, int K);
int tile_vec_pack_a(tile_form_t form, int M, int K, int tk, const float *A, int lda,
                    float *packed);
int tile_vec_ksum_packed(tile_form_t form, int M, int N, int K, int tk, const float *packed,
                         const float *B, int ldb, double *S, int lds, float *out, int ldo,
                         unsigned char *bad, float *work);
size_t tile_vec_ksum_panel_work(int K, int tk);

/* tile_vec_ksum_packed certifies a register block's sums by the range of
 * its partials' exponents (tile_vec.c), and runs the block again with
 * TwoSum where that range is too wide. Since start: the register blocks
 * it ran (*all) and those run again (*twosum). */
void tile_vec_ksum_counts(long *all, long *twosum);

/* The largest |c_openblas - c_portable| the bound above allows for one
 * element, given K and S = sum_k |a_ik||b_kj| (computed in fp64). */
static inline double tile_backend_tolerance(int K, double sum_abs_products) {
    return 2.0 * (double)K * 0x1p-23 * sum_abs_products + (double)K * 0x1p-149;
}

#endif
