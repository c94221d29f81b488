// tests/group_prelude.hpp - every header a grouped test file includes.
//
// The test files are compiled a group at a time (tests/CMakeLists.txt,
// BIAFFINE_TEST_GROUPS): one generated translation unit per area includes
// this file, then each test file inside a namespace of its own, so the
// scorers and layer stacks that several files instantiate are compiled once
// per group instead of once per file. Each file's own #include lines are
// then no-ops (every header here is guarded); a header included inside a
// namespace would not be, so configure fails when a test file includes one
// that is not listed here (tests/CMakeLists.txt names the file and the line).
// Conditions mirror the test files' own.
#pragma once

#include "biaffine/detail/eigen.hpp"  // first: Eigen, without GCC 12's AVX-512 false positives
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "biaffine/batching.hpp"
#include "biaffine/bfloat16.hpp"
#include "biaffine/biaffine.hpp"
#include "biaffine/conllu.hpp"
#include "biaffine/convert.hpp"
#include "biaffine/decode.hpp"
#include "biaffine/tree_crf.hpp"
#include "biaffine/detail/compute/avx2_kernel.hpp"
#include "biaffine/detail/compute/avx512_bf16.hpp"
#include "biaffine/detail/compute/avx512_bf16_gemm.hpp"
#include "biaffine/detail/compute/avx512_small.hpp"
#include "biaffine/detail/compute/backend.hpp"
#include "biaffine/detail/compute/bf16_emulated.hpp"
#include "biaffine/detail/compute/bf16_forward.hpp"
#include "biaffine/detail/compute/bf16_train.hpp"
#include "biaffine/detail/compute/host_batch.hpp"
#include "biaffine/detail/compute/interface.hpp"
#include "biaffine/detail/softmax.hpp"
#include "biaffine/lazy_split.hpp"
#include "biaffine/memory.hpp"
#include "biaffine/pairwise_bilinear.hpp"
#include "biaffine/scorer.hpp"
#include "biaffine/workspace.hpp"
#if defined(__AVX2__) && defined(__FMA__)
#include "biaffine/detail/compute/avx2_backend.hpp"
#endif

#include "arena_backend.hpp"
#include "bf16_helpers.hpp"
#include "bf16_reference.hpp"
#include "bf16_scorer.hpp"
#include "golden.hpp"
#include "layer_helpers.hpp"
#include "reference_mst.hpp"
#include "test_scale.hpp"
