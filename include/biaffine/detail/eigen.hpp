// biaffine/detail/eigen.hpp - the library's one include of Eigen.
//
// GCC 12.1 and 12.2 report `'__Y' may be used uninitialized` from their own
// avx512fintrin.h wherever Eigen's AVX-512 packet code is inlined (GCC bug
// 105593: the intrinsics' deliberately undefined merge operand; fixed in
// 12.3 and 13). Every AVX-512 build of a program that uses Eigen's products
// gets hundreds of them, and -Werror fails. The warning state Eigen's code is
// checked against is the one in force where Eigen is included, so it is
// silenced here, only for those compilers, only on AVX-512 targets and only
// for Eigen. A program that includes Eigen itself before any biaffine header
// gets the warnings from its own include (see README, "Warnings").
#pragma once

#include "biaffine/config.hpp"

#if BIAFFINE_SILENCE_GCC_105593
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <Eigen/Core>

#if BIAFFINE_SILENCE_GCC_105593
#pragma GCC diagnostic pop
#endif
