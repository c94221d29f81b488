// biaffine/detail/compute/avx512_config.hpp - tuned numbers of the AVX-512 small-product
// kernels (avx512_small.hpp: zmm_dots, zmm_combos).
//
// Included by biaffine/config.hpp, the one place that lists every switch and
// tuned number: each is a macro you may define before including any biaffine
// header (or with -D) to override it. They change speed only, never results
// beyond float rounding order.
#pragma once

/// 1: on AVX-512 targets the float backend takes a split's small products
/// into 512-bit registers with nothing packed (detail/compute/
/// avx512_small.hpp): its scores by blocks of dot products (zmm_dots) where
/// BIAFFINE_AVX512_DOTS_MAX_N or _MAX_ROWS admit it, their backward by
/// combinations of whole rows (zmm_combos) up to
/// BIAFFINE_AVX512_COMBOS_MAX_ROWS. 0: the kernel, row_dots and row_combos
/// as the rules of avx2_config.hpp and per_split_config.hpp choose. On an AMD EPYC Zen 5 (family 26), data hot,
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
