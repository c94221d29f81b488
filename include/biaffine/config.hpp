// biaffine/config.hpp - every build switch, and (through the per-backend
// headers it includes at its end) every tuned number.
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

// Whether the compiler targets AMX-TILE and AMX-BF16: GCC spells the macros
// __AMX_TILE__ / __AMX_BF16__, Clang (14) __AMXTILE__ / __AMXBF16__. Not a
// switch: read by abi.hpp and detail/compute/amx_bf16_gemm.hpp.
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_BF16__) || defined(__AMXBF16__))
#define BIAFFINE_DETAIL_AMX_TARGET 1
#else
#define BIAFFINE_DETAIL_AMX_TARGET 0
#endif

// -------------------------------------------------- per-backend tuned numbers
// Each backend's tuned numbers live beside it, in detail/compute/; all are
// included here, so that defining one before any biaffine header (or with -D)
// still overrides it.
#include "biaffine/detail/compute/per_split_config.hpp"
#include "biaffine/detail/compute/avx2_config.hpp"
#include "biaffine/detail/compute/avx512_config.hpp"
#include "biaffine/detail/compute/bf16_config.hpp"
