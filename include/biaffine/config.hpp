// biaffine/config.hpp - every build switch and tuned number, in one place.
//
// Each is a macro you may define before including any biaffine header (or
// with -D on the command line) to override it. A tuned number says what it
// controls and on which CPU it was measured; they change speed only, never
// results beyond float rounding order (the tests hold for any setting).
#pragma once

// ---------------------------------------------------------------- switches

/// Define to build the float path without the hand-written AVX2/FMA GEMM
/// kernel: every product then goes through Eigen (as double always does).
/// The kernel is otherwise used when the compiler targets AVX2 and FMA.
// #define BIAFFINE_NO_GEMM_KERNEL

/// 1: silence GCC bug 105593 (`'__Y' may be used uninitialized` from
/// avx512fintrin.h inside Eigen's AVX-512 code) around the library's include
/// of Eigen. Default: on for GCC 12.1 / 12.2 targeting AVX-512, the compilers
/// that have the bug; off everywhere else.
#ifndef BIAFFINE_SILENCE_GCC_105593
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && __GNUC_MINOR__ < 3 && defined(__AVX512F__)
#define BIAFFINE_SILENCE_GCC_105593 1
#else
#define BIAFFINE_SILENCE_GCC_105593 0
#endif
#endif

// ------------------------------------------ per-split products, every backend

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
/// Rows of X^T dZ (and Ua^T dT) summed per kernel call in the weight
/// gradients: keeps a [96, chunk] block of X^T in L2 and the dZ panel in L1
/// (AVX2 EPYC).
#ifndef BIAFFINE_AVX2_DW_CHUNK
#define BIAFFINE_AVX2_DW_CHUNK 256
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
#ifndef BIAFFINE_AVX2_SCORES_FILL_MANY
#define BIAFFINE_AVX2_SCORES_FILL_MANY 70
#endif
#ifndef BIAFFINE_AVX2_SCORES_MIN_N
#define BIAFFINE_AVX2_SCORES_MIN_N 32
#endif
#ifndef BIAFFINE_AVX2_SCORES_FILL_FEW
#define BIAFFINE_AVX2_SCORES_FILL_FEW 80
#endif
