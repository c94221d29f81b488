// biaffine/detail/compute/bf16_config.hpp - tuned numbers of the bf16
// inference path (bf16_forward.hpp, amx_bf16_gemm.hpp).
//
// Included by biaffine/config.hpp, the one place that lists every switch and
// tuned number: each is a macro you may define before including any biaffine
// header (or with -D) to override it. They change speed only, never results
// beyond float rounding order.
#pragma once

/// Bytes of T (and the group's other rows) a bf16 forward holds at once
/// (bf16_forward.hpp): the fp32 kernel's score group
/// (BIAFFINE_AVX2_SCORE_GROUP_BYTES on AVX-512) in bf16 elements, so a
/// group of T stays in L2 while its splits are scored.
#ifndef BIAFFINE_BF16_GROUP_BYTES
#define BIAFFINE_BF16_GROUP_BYTES (2 * 1024 * 1024)
#endif
/// Bytes of packed B (weights) per column block of the AMX GEMM
/// (amx_bf16_gemm.hpp): the rows pass over one block of panels while it
/// stays in L2, beside the rows' A tiles in L1. 512 KiB, a quarter of the
/// 2 MiB L2 of the AMX Xeons this was written on (Intel Xeon, family 6
/// model 167 KVM guest); chosen for the cache, not swept.
#ifndef BIAFFINE_AMX_COLUMN_BLOCK_BYTES
#define BIAFFINE_AMX_COLUMN_BLOCK_BYTES (512 * 1024)
#endif
