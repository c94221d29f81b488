// biaffine/config.hpp - every build switch and tuned number, in one place.
//
// Each is a macro you may define before including any biaffine header (or
// with -D on the command line) to override it. A tuned number says what it
// controls and on which CPU it was measured; they change speed only, never
// results beyond float rounding order (the tests hold for any setting).
#pragma once

// ---------------------------------------------------------------- switches

/// Define to build the float path without the hand-written GEMM kernel
/// (avx2_kernel.hpp): every product then goes through Eigen (as double
/// always does). The kernel is otherwise used whenever the compiler targets
/// AVX2 and FMA, AVX-512 targets included (see
/// BIAFFINE_AVX2_KERNEL_ON_AVX512).
// #define BIAFFINE_NO_GEMM_KERNEL

/// 1: float runs on the kernel also when the compiler targets AVX-512 (its
/// 512-bit body, BIAFFINE_AVX2_KERNEL_ZMM); 0: on AVX-512 targets float runs
/// on Eigen's AVX-512 GEMM. Measured (g++ 12.2, -O3 -march=native, Eigen
/// 3.4.0, bench_vs_reference, medians of 5, share of the BLAS/Eigen GEMM
/// roofline of the same run):
/// - Intel Xeon, AVX-512 (family 6 model 207, two 512-bit FMA units), the
///   6 x 32 body: 100k tokens, o = 1 79% on the kernel against 69% on Eigen;
///   20k, o = 50 61% against 51%; training 61% against 55%; 1M tokens, 2
///   threads 82% against 66%. The projection alone (bench_kernels
///   BM_projection) 105-106 GFLOP/s against 97-110; with the 6 x 16 body
///   it had been 63-74, slower than Eigen.
/// - AMD EPYC Zen 4 (AVX-512 executed as two 256-bit halves), the 6 x 16
///   body: the projection 88.7 on the kernel against 60.7 on Eigen; the
///   pipeline at 100k tokens, o = 1 0.24-0.27 s against 0.32-0.38 s.
/// - AVX2 without AVX-512 (AMD EPYC Zen 3): the kernel (projection 74 vs
///   49.9); this switch does not apply there.
#ifndef BIAFFINE_AVX2_KERNEL_ON_AVX512
#define BIAFFINE_AVX2_KERNEL_ON_AVX512_DEFAULT 1  // for the tests: not overridden
#define BIAFFINE_AVX2_KERNEL_ON_AVX512 1
#endif

/// Tracked blocks of at least this many bytes (per-document gradients, a
/// long document's packed rows) are mapped from the kernel 2 MiB-aligned on
/// transparent huge pages (Linux, madvise) and, once freed, kept in the
/// block cache (see BIAFFINE_CACHED_BLOCK_MIN_BYTES) for the next request;
/// 0 sends every block through operator new. 32 MiB is where glibc already
/// maps every block afresh, so nothing below it loses glibc's reuse of
/// freed memory. 100k tokens, o = 1, training (Zen 4 EPYC, AVX-512, THP
/// `madvise`): the 25,000 page faults of the 102 MB dX took 8% of the step
/// on 4 KiB pages (perf); mapped afresh on huge pages the step took 0.658 /
/// 0.693 / 0.702 s against 0.725 / 0.797 / 0.770 (three alternated rounds);
/// cached, the step faults 2 pages instead of 463 (perf stat, same case).
#ifndef BIAFFINE_HUGE_PAGE_MIN_BYTES
#define BIAFFINE_HUGE_PAGE_MIN_BYTES (32 << 20)
#endif

/// Blocks of this size or more that the library allocates again and again
/// (cached_tag: the activations a training forward keeps for its backward,
/// U, V, T and the softmax outputs of one batch) are mapped on huge pages
/// and, once freed, cached for the next request (detail/block_cache.hpp;
/// release_cached_blocks() gives the cache back).
/// From the heap, glibc returned them to the system after each backward and
/// every step faulted them in afresh: 100k tokens, o = 1, training (Zen 4
/// EPYC, AVX-512): 82.9% of the BLAS roofline (median of 8 alternated
/// rounds) against 78.1% with the kept activations on the heap. 0 sends
/// them through operator new.
#ifndef BIAFFINE_CACHED_BLOCK_MIN_BYTES
#define BIAFFINE_CACHED_BLOCK_MIN_BYTES (2 << 20)
#endif

/// Score tensors handed to the caller of up to a quarter of this many bytes
/// are cut from mapped chunks of this size, which stay mapped for the next
/// call once every score in them is freed
/// (detail/output_chunks.hpp). From the heap, glibc gave them back to the
/// system after each call and every call faulted them in afresh: about a
/// tenth of a call over 20k tokens at 50 labels (AVX-512 Xeon model 207).
/// Holding one split's scores keeps its chunk mapped. A power of two of at
/// least 2 MiB; 0 sends scores through operator new (so does
/// AddressSanitizer, to check their bounds).
#ifndef BIAFFINE_OUTPUT_CHUNK_BYTES
#define BIAFFINE_OUTPUT_CHUNK_BYTES (8 << 20)
#endif

/// Freed output chunks kept for reuse, at most this many bytes; past it a
/// freed chunk is unmapped. release_cached_blocks() unmaps them all. With 32
/// MiB, 1M tokens on two threads (100 MB of scores per call) mapped most of
/// its chunks afresh on every call and took 1.12-1.15 s against 0.92-1.02
/// from the heap; with 256 MiB 0.83-0.99 (AVX-512 Xeon model 207).
#ifndef BIAFFINE_OUTPUT_CHUNK_CACHE_BYTES
#define BIAFFINE_OUTPUT_CHUNK_CACHE_BYTES (256 << 20)
#endif

/// 1: output chunks on transparent huge pages (MADV_HUGEPAGE). Off by
/// default: reuse, not the page size, is what saves the faults, and where
/// chunks past the cache were mapped afresh each call, huge pages took more
/// system time (1M tokens, two threads, 32 MiB cache: 2.9 s of system time
/// over six calls against 1.4 from the heap; 4 KiB pages with 256 MiB
/// cached 0.83-0.86 s a call against 0.89-0.98 on huge pages; AVX-512 Xeon
/// model 207, a VM).
#ifndef BIAFFINE_OUTPUT_CHUNK_HUGE_PAGES
#define BIAFFINE_OUTPUT_CHUNK_HUGE_PAGES 0
#endif

/// Define (and link a CBLAS: OpenBLAS or BLIS) to run the scorer's
/// batch-wide products - projections, U.W', their backward, the input
/// gradient - on cblas_?gemm, for float and double; per-split products stay
/// on Eigen / row_dots. CMake: -DBIAFFINE_WITH_BLAS=ON defines it and links.
// #define BIAFFINE_USE_BLAS

/// 1: with BIAFFINE_USE_BLAS, set the BLAS's own thread pool (OpenBLAS or
/// BLIS) to one thread on first use: the library runs batches on its own
/// threads (batch_options::threads). 0: leave the pool as the program set it.
#ifndef BIAFFINE_BLAS_PIN_THREADS
#define BIAFFINE_BLAS_PIN_THREADS 1
#endif

/// 1: silence GCC bug 105593 (`'__Y' may be used uninitialized` from
/// avx512fintrin.h inside Eigen's AVX-512 code), and the same compilers'
/// `-Warray-bounds` false positive on Eigen's packet loads there, around the
/// library's include of Eigen. Default: on for GCC 12.1 / 12.2 targeting AVX-512, the compilers
/// that have the bug; off everywhere else.
#ifndef BIAFFINE_SILENCE_GCC_105593
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && __GNUC_MINOR__ < 3 && defined(__AVX512F__)
#define BIAFFINE_SILENCE_GCC_105593 1
#else
#define BIAFFINE_SILENCE_GCC_105593 0
#endif
#endif

// ------------------------------------------ per-split products, every backend

/// Softmax groups (a split's row at one label, a head's labels) of at least
/// this many scores go through detail::softmax_span (packets only, the
/// last one padded through a buffer), shorter ones through Eigen's array
/// expression; see detail/softmax.hpp for the figures (AMD EPYC Zen 5: the
/// crossover between 6 and 8 scores).
#ifndef BIAFFINE_SOFTMAX_SPAN_MIN
#define BIAFFINE_SOFTMAX_SPAN_MIN 8
#endif

/// How many splits ahead the per-split loops (scores, their backward)
/// prefetch a split's operands that come from L3 or memory (its rows of V,
/// in backward also T, the kept softmax outputs and the score gradient); 0:
/// none. 2 against 1, AMD EPYC Zen 5 (AVX-512), alternated in one process
/// (medians of 25 steps): training over 100k tokens at one label, the
/// backward loop's 2 ahead 0.2249 against 0.2266 s (faster in 23 of 25
/// pairs), the forward's too 0.2249 against 0.2269 (22 of 25); inference
/// 0.0683 against 0.0698 s (28 of 31); 20k tokens at 50 labels within the
/// noise; 3 ahead in the backward no faster than 1.
#ifndef BIAFFINE_PREFETCH_SPLITS_AHEAD
#define BIAFFINE_PREFETCH_SPLITS_AHEAD 2
#endif

/// Splits of at most this many tokens compute their scores S = Va Tr^T (and
/// the backward) with the packing-free dot-product kernels of row_dots.hpp
/// instead of a GEMM, which spends as long packing as multiplying there.
/// Measured with bench_kernels (BM_bilinear_right, hv = 129) on an AVX2 AMD
/// EPYC.
#ifndef BIAFFINE_ROW_DOTS_MAX_N
#define BIAFFINE_ROW_DOTS_MAX_N 12
#endif
/// ... and only while n * labels (the rows of Tr) is at most this (forward).
#ifndef BIAFFINE_ROW_DOTS_MAX_ROWS
#define BIAFFINE_ROW_DOTS_MAX_ROWS 256
#endif
/// ... and at any n while n * labels is at most this (forward only; with one
/// label n <= 31, with two n <= 15). In one run row_dots ran at 40-43
/// GFLOP/s for one label and n = 17-32 where Eigen's GEMM ran at 26-39 (it
/// loses from n * labels = 32 on; with 4 labels Eigen wins from n = 16).
/// Same bench, same CPU. row_dots' speed depends on where its operands lie
/// (18-45 GFLOP/s for the same sizes across runs); on AVX2 builds
/// kernel_score_rows takes splits of n >= 16 first (config below).
#ifndef BIAFFINE_ROW_DOTS_SMALL_ROWS
#define BIAFFINE_ROW_DOTS_SMALL_ROWS 31
#endif
/// The same bound for the backward (BM_bilinear_right_backward, same CPU).
#ifndef BIAFFINE_ROW_COMBOS_MAX_ROWS
#define BIAFFINE_ROW_COMBOS_MAX_ROWS 300
#endif

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
/// 1: on AVX-512 targets the float backend takes a split's small products
/// into 512-bit registers with nothing packed (detail/compute/
/// avx512_small.hpp): its scores by blocks of dot products (zmm_dots) where
/// BIAFFINE_AVX512_DOTS_MAX_N or _MAX_ROWS admit it, their backward by
/// combinations of whole rows (zmm_combos) up to
/// BIAFFINE_AVX512_COMBOS_MAX_ROWS. 0: the kernel, row_dots and row_combos
/// as the rules above choose. On an AMD EPYC Zen 5 (family 26), data hot,
/// a 100k-token document's splits at one label (mostly 10-30 tokens): the
/// scores 4.4 ms against 5.9, their backward 6.5-7.2 against 8.7-9.0 (best
/// of 5 per length, weighted by the document's lengths); a training step
/// 0.227-0.237 s against 0.237-0.243 (three alternated runs, medians of
/// 10).
#ifndef BIAFFINE_AVX512_SMALL_PRODUCTS
#define BIAFFINE_AVX512_SMALL_PRODUCTS 1
#endif
/// zmm_dots takes the scores of a split of at most this many tokens, or of
/// at most BIAFFINE_AVX512_DOTS_MAX_ROWS rows of Tr (n * labels). Same CPU,
/// GFLOP/s, T hot (best of 7), zmm_dots against the rules above: one label
/// n = 20 / 28 / 40 / 46: 199 / 201 / 198 / 181 against 114 / 93 / 153 /
/// 161, n = 48 / 64: 197 / 191 against 202 / 217 (full panels); four labels
/// n = 12 / 20 / 24: 200 / 199 / 200 against 60 / 132 / 171, n = 30 / 32:
/// 188 / 200 against 204 / 236; 50 labels n = 8 / 16 / 20 / 24: 196 / 198 /
/// 198 / 193 against 108 / 188 / 159 / 190, n = 26 / 32: 177 / 194 against
/// 205 / 250.
#ifndef BIAFFINE_AVX512_DOTS_MAX_N
#define BIAFFINE_AVX512_DOTS_MAX_N 24
#endif
#ifndef BIAFFINE_AVX512_DOTS_MAX_ROWS
#define BIAFFINE_AVX512_DOTS_MAX_ROWS 47
#endif
/// zmm_combos takes the backward of a split with at most this many rows of
/// Tr (n * labels): it reads all of Tr once per three rows of dVa (and all
/// of Va once per three rows of dTr), so once they leave L2 the kernel's
/// packed panels win. Same CPU, data hot, GFLOP/s: a 100k-token document's
/// lengths at 50 labels, n = 9-16 / 17-24 / 33-40 / 41-48 / 57-64 at 235 /
/// 234 / 220 / 210 / 197 against the kernel's 166 / 184 / 207 / 211 / 216;
/// one label, n = 300 / 600 / 800 at 230 / 235 / 233 against 210 / 207 /
/// 208 (longer splits at one label were not measured).
#ifndef BIAFFINE_AVX512_COMBOS_MAX_ROWS
#define BIAFFINE_AVX512_COMBOS_MAX_ROWS 2048
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
