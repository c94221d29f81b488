// biaffine/detail/compute/per_split_config.hpp - tuned numbers of the per-split products that every
// backend shares (softmax, prefetch, row_dots / row_combos).
//
// Included by biaffine/config.hpp, the one place that lists every switch and
// tuned number: each is a macro you may define before including any biaffine
// header (or with -D) to override it. They change speed only, never results
// beyond float rounding order.
#pragma once

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
