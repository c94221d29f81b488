// biaffine/detail/eigen.hpp - the library's one include of Eigen.
//
// GCC 12.1 and 12.2 report `'__Y' may be used uninitialized` from their own
// avx512fintrin.h wherever Eigen's AVX-512 packet code is inlined (GCC bug
// 105593: the intrinsics' deliberately undefined merge operand; fixed in
// 12.3 and 13). Every AVX-512 build of a program that uses Eigen's products
// gets hundreds of them, and -Werror fails. The warning state Eigen's code is
// checked against is the one in force where Eigen is included, so it is
// silenced here, only for those compilers, only on AVX-512 targets and only
// for Eigen. The same compilers tuning for Zen (-march=native on a Zen 4,
// which g++ 12 calls znver3 with AVX-512) also report `array subscript
// '__m512d_u[0]' is partly outside array bounds` from avx512fintrin.h, on
// Eigen's 8-double packet loop over a 4-double Map that the loop's own size
// check skips at run time; silenced alike. A program that includes Eigen itself before any biaffine header
// gets the warnings from its own include (see README, "Warnings").
#pragma once

#include "biaffine/config.hpp"

#if BIAFFINE_SILENCE_GCC_105593
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif

#include <Eigen/Core>

#if BIAFFINE_SILENCE_GCC_105593
#pragma GCC diagnostic pop
#endif
