// biaffine/detail/compute/avx2_config.hpp - tuned numbers of the AVX2/FMA GEMM kernel and the
// float backend built on it (avx2_kernel.hpp, avx2_backend.hpp).
//
// Included by biaffine/config.hpp, the one place that lists every switch and
// tuned number: each is a macro you may define before including any biaffine
// header (or with -D) to override it. They change speed only, never results
// beyond float rounding order.
#pragma once

// ------------------------------------------------------ the AVX2/FMA kernel

/// Rows of the left operand per cache block: a [96, K] block of A stays in
/// L2 while every 16-column panel of B passes over it (AVX2 EPYC, K <= 512).
#ifndef BIAFFINE_AVX2_ROW_BLOCK
#define BIAFFINE_AVX2_ROW_BLOCK 96
#endif
/// Where the target has AVX-512, the kernel's inner loop keeps each row of
/// its block in 512-bit registers (the row's element of A broadcast from
/// memory inside the FMA): 2 = a 6 x 32 block over two panels, two
/// registers per row (12 independent FMA chains); 1 = a 6 x 16 block, one
/// register per row (6 chains); 0 = the 256-bit loop (6 x 16, two registers
/// per row). Same panels, same epilogue. Ignored without AVX-512.
/// - Intel Xeon, AVX-512 (model 207, two 512-bit FMA units with a latency
///   of 4: eight chains keep them busy): the projection (bench_kernels
///   BM_projection) 105-106 GFLOP/s with 2 against 63-74 with 1; the
///   pipeline, 100k tokens, o = 1 0.160 s on 2 against 0.205 s on Eigen
///   (6 chains had been slower than Eigen there).
/// - AMD EPYC Zen 4 (AVX-512 as two 256-bit halves; g++ 12.2, -O3
///   -march=native; bench_vs_reference --impls ours, medians of 5, six
///   alternated rounds), 1 against 0: 100k tokens, o = 1 0.187-0.209 s
///   against 0.198-0.256 s; 20k, o = 50 0.517-0.534 against 0.537-0.623;
///   training 0.697-0.712 against 0.731-0.765 (three rounds). 2 was not
///   measured there: it loads each panel row once for twice the FMAs.
#ifndef BIAFFINE_AVX2_KERNEL_ZMM
#define BIAFFINE_AVX2_KERNEL_ZMM 2
#endif
/// Whether the GEMM kernel, on its first panel over a row block, prefetches
/// into L1 the rows of A the next block of rows will read (one line per row
/// every 16 steps of k). The projections read the document's rows once, from
/// memory; the hardware prefetcher alone left the kernel at 108-123 GFLOP/s
/// on [100k, 256] x [256, 128] against 154-158 on 2048 rows that stay in L2,
/// and this prefetch took it to 126-138 (AVX-512 Xeon, model 207; 100k
/// tokens, one label end to end: median 0.173 s against 0.194, five
/// alternated rounds). Default 1 on AVX-512 targets, where that was
/// measured, 0 elsewhere (not measured on an AVX2-only CPU).
#ifndef BIAFFINE_AVX2_PREFETCH_A
#if defined(__AVX512F__)
#define BIAFFINE_AVX2_PREFETCH_A 1
#else
#define BIAFFINE_AVX2_PREFETCH_A 0
#endif
#endif
/// Rows of X^T dZ (and Ua^T dT) summed per kernel call in the weight
/// gradients: keeps a [96, chunk] block of X^T in L2 and the dZ panel in L1
/// (AVX2 EPYC). The input backward takes the relu backward, dW and dX a
/// chunk of this many rows at a time.
#ifndef BIAFFINE_AVX2_DW_CHUNK
#define BIAFFINE_AVX2_DW_CHUNK 256
#endif
/// 1: the input backward writes dX out to the splits' rows with stores that
/// bypass the caches (where the rows are dense and 32-byte aligned): a
/// document's dX (102 MB at 100k tokens) is written once and read by the
/// caller, so ordinary stores first read every line from memory and push
/// the batch's operands out of L3. The input backward over 2,615 rows of a
/// 100k-token document ran 1% faster with it (AMD EPYC Zen 5, alternated
/// in one process).
#ifndef BIAFFINE_AVX2_STREAM_DX
#define BIAFFINE_AVX2_STREAM_DX 1
#endif
/// Per-split scores go through the kernel (instead of Eigen's GEMM) when its
/// 16-column panels over the split's n tokens are mostly full: with at least
/// BIAFFINE_AVX2_SCORES_MANY_LABELS labels when n fills at least
/// BIAFFINE_AVX2_SCORES_FILL_MANY percent of them, with fewer labels from
/// n = BIAFFINE_AVX2_SCORES_MIN_N and BIAFFINE_AVX2_SCORES_FILL_FEW percent.
/// Measured on an AVX2 EPYC (hv = 129): with one label n = 20, 24 and 25
/// lose by 10-35% against Eigen, n = 32 wins by 30%.
#ifndef BIAFFINE_AVX2_SCORES_MANY_LABELS
#define BIAFFINE_AVX2_SCORES_MANY_LABELS 4
#endif
/// With the 6 x 32 body (BIAFFINE_AVX2_KERNEL_ZMM 2 on AVX-512 targets)
/// the many-label fill is 55: there, at 50 labels, n = 18 / 20 / 22 (56 /
/// 63 / 69% of two panels) ran at 131-136 / 146-149 / 160-164 GFLOP/s
/// against Eigen's 118-125 / 127-132 / 122-127, n = 17 (53%) at 124-129
/// against 122-128 (AMD EPYC Zen 5, family 26, best of 7 rounds, T hot;
/// with the transposed store of store_zmm_columns). Elsewhere 70.
#ifndef BIAFFINE_AVX2_SCORES_FILL_MANY
#if BIAFFINE_AVX2_KERNEL_ZMM >= 2 && defined(__AVX512F__)
#define BIAFFINE_AVX2_SCORES_FILL_MANY 55
#else
#define BIAFFINE_AVX2_SCORES_FILL_MANY 70
#endif
#endif
#ifndef BIAFFINE_AVX2_SCORES_MIN_N
#define BIAFFINE_AVX2_SCORES_MIN_N 32
#endif
#ifndef BIAFFINE_AVX2_SCORES_FILL_FEW
#define BIAFFINE_AVX2_SCORES_FILL_FEW 80
#endif
/// Otherwise a split of n >= 16 runs its full 16-row panels on the kernel
/// and the n % 16 rows left over on row_dots: with fewer than
/// BIAFFINE_AVX2_SCORES_MANY_LABELS labels always, with more while they are
/// at most this many. Same CPU, hv = 129 (bench_kernels BM_bilinear_right,
/// path 3 against the faster of row_dots and Eigen, GFLOP/s): 50 labels,
/// n = 18 / 20: 61 / 56 against 36 / 39; one label, n = 18 / 36 / 50: 40 / 50
/// / 59 against 29 / 34 / 39. With 50 labels and 8 or 12 rows left over
/// (n = 24, 28) row_dots made it slower: 36 / 33 against 52 / 64.
/// With the 6 x 32 body (BIAFFINE_AVX2_KERNEL_ZMM 2 on AVX-512 targets) 0:
/// there a split of 17-20 tokens at 50 labels ran its 16-row panel plus
/// row_dots at 0.75-0.93 of Eigen's speed (n = 17-20; median of 15
/// interleaved rounds, AVX-512 Xeon model 207), so a split below the
/// many-label fill (n = 17 of 32 columns at 55%) takes Eigen's GEMM.
#ifndef BIAFFINE_AVX2_SCORES_DOTS_TAIL
#if BIAFFINE_AVX2_KERNEL_ZMM >= 2 && defined(__AVX512F__)
#define BIAFFINE_AVX2_SCORES_DOTS_TAIL 0
#else
#define BIAFFINE_AVX2_SCORES_DOTS_TAIL 4
#endif
#endif
/// 1: with many labels the kernel takes a split whose 16-column panels are
/// an odd number (above one). The 6 x 32 body pairs panels; a last unpaired
/// one once ran on six accumulators, below the FMA latency's need, and at
/// 50 labels the kernel then ran n = 34 / 36 / 40 / 44 / 100 at 0.78-0.91
/// of Eigen's speed (AVX-512 Xeon model 207), so this was 0 there. The
/// unpaired panel now takes blocks of up to 12 rows (12 chains, as the
/// pair), in 256-bit registers when at most 8 of its columns are used: at 50
/// labels n = 36 / 40 / 48 / 80 / 100 ran at 156 / 172 / 190 / 204 / 179
/// GFLOP/s against Eigen's 153 / 156 / 149 / 173 / 161, and a 20k-token
/// document's splits, T hot, in 0.0502 s against 0.0526 with 0 (best of 9,
/// AMD EPYC Zen 5, family 26). Not re-measured on the Xeon.
#ifndef BIAFFINE_AVX2_SCORES_ODD_PANELS
#define BIAFFINE_AVX2_SCORES_ODD_PANELS 1
#endif
/// 1: the backward of a split's scores, dVa = dS Tr and dTr = dS^T Va, runs
/// on the kernel (B = Tr or Va read in place, dS transposed once; a last
/// odd column of hv as two matrix-vector products) where neither zmm_combos
/// (BIAFFINE_AVX512_SMALL_PRODUCTS, which goes first) nor row_combos
/// (use_row_combos) takes it. On an AMD EPYC Zen 5 (family 26, AVX-512)
/// a 100k-token document's splits at one label took 11.2-11.4 ms against
/// 14.3-14.9 for Eigen's GEMM, 20k tokens' at 50 labels 109 against
/// 144-149 ms (data hot, best of 9, two runs). 0 (Eigen's GEMM for those
/// splits) where the target lacks AVX-512: on an
/// AVX2 EPYC the kernel won alone (one label, n = 13-100: 40-76 against
/// 35-59 GFLOP/s) but a training step over 100k tokens took 0.93-1.17 s
/// with it against 0.92-1.15 without (four alternated rounds).
#ifndef BIAFFINE_AVX2_SCORES_BACKWARD
#if BIAFFINE_AVX2_KERNEL_ZMM >= 2 && defined(__AVX512F__)
#define BIAFFINE_AVX2_SCORES_BACKWARD 1
#else
#define BIAFFINE_AVX2_SCORES_BACKWARD 0
#endif
#endif
/// With at least this many labels the last odd column of every label's
/// block of W (the bias column at h = 128) is one more packed product over
/// all labels, stored with a stride of hv; with fewer, one matrix-vector
/// product per label (a 16-column panel would be mostly padding). At 50
/// labels the matrix-vector products took 3% of inference (perf, AVX2 EPYC).
#ifndef BIAFFINE_AVX2_LAST_COLUMN_PANEL_LABELS
#define BIAFFINE_AVX2_LAST_COLUMN_PANEL_LABELS 8
#endif
/// Inference and the training forward compute T = U W' for a group of
/// consecutive splits at a time, then score those splits while their rows of
/// T and V are still in L2 (every label's block of W packed once per batch).
/// A group holds as many rows as fit (labels + 1) * hv floats per row in
/// this many bytes, and at least one split. Per-split scores read T from
/// L3 or memory otherwise: U W' plus the scores of a 20k-token document
/// (50 labels, batches of 540 rows) took 11% less time with groups of 40
/// rows than with T for the whole batch, 100k tokens with one label 14%
/// less with groups of 200 rows (one process, alternated, AVX2 EPYC with
/// 512 KiB of L2 per core; groups of 9-80 rows at 50 labels and 100-400 at
/// one label were within the noise of each other).
/// The default is 512 KiB (the L2 of a Zen 3 core) where the target lacks
/// AVX-512 and 2 MiB where it has it: each group reads all of W (3.3 MB at
/// 50 labels, h = 128) from L3, so more rows per group mean less of that
/// traffic, and a group ends at a split's end, so at 50 labels a 1 MiB
/// group (at most 39 rows) often held one split of about 20 rows. On an
/// AVX-512 Xeon (2 MiB of L2), 20k tokens with 50 labels reached 60-65% of
/// the roofline (median 62.5) with 512 KiB, 65-70% (median 68) with 1 MiB
/// and 62-77% (median 67.5) with 1.5 MiB; 100k tokens with one label 75-89
/// / 73-87 / 68-83% (medians 79 / 80 / 80; eight and six alternated rounds,
/// `bench_vs_reference --impls ours,blas_gemm`). On an AMD EPYC Zen 5
/// (family 26, 1 MiB of L2, 32 MiB of L3) 20k tokens with 50 labels took
/// 0.219-0.233 s with 2 MiB against 0.226-0.241 with 1 MiB (seven
/// alternated rounds, medians of 7) and 0.222-0.242 with 4 MiB; U W' alone
/// over 20k rows ran at 211-217 GFLOP/s in groups of 39 rows, 224-230 in
/// groups of 78. One label and training were within the noise of 1 MiB
/// there. Groups of 9-80 rows at 50 labels were within the noise on the
/// AVX2 EPYC (above).
#ifndef BIAFFINE_AVX2_SCORE_GROUP_BYTES
#if defined(__AVX512F__)
#define BIAFFINE_AVX2_SCORE_GROUP_BYTES (2 * 1024 * 1024)
#else
#define BIAFFINE_AVX2_SCORE_GROUP_BYTES (512 * 1024)
#endif
#endif
