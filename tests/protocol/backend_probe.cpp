// Compile-only probes of the backend contract (detail/compute/interface.hpp),
// run by ctest through the compiler (tests/CMakeLists.txt, backend_contract_*):
// BIAFFINE_PROBE picks the case.
//   0  user host ops that reuse the Eigen backend's operations and name
//      themselves: pass check_host_ops, and under host_batch check_backend
//   1  user host ops with only their name, tunables and sizes:
//      check_host_ops fails with the contract's message naming projections,
//      not a page of templates
//   2  a user batch-level backend (host_batch's operations, forwarded)
//      without score_outputs: check_backend fails with the message naming
//      score_outputs
#include <cstddef>

#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/host_batch.hpp"
#include "biaffine/detail/compute/interface.hpp"

#ifndef BIAFFINE_PROBE
#error "define BIAFFINE_PROBE (0, 1 or 2)"
#endif

namespace probe {

#if BIAFFINE_PROBE == 0
struct user_backend : biaffine::detail::eigen_backend<float> {
    static constexpr const char* name = "user";
};
static_assert(biaffine::detail::check_host_ops<user_backend, float>());
static_assert(biaffine::detail::check_backend<biaffine::detail::host_batch<user_backend, float>, float>());
#elif BIAFFINE_PROBE == 1
struct user_backend {
    static constexpr const char* name = "user";
    static constexpr const char* operations = "nothing yet";
    static constexpr bool reads_items = false;
    static std::size_t packed_elements(const biaffine::detail::scorer_dims&, std::size_t) noexcept { return 0; }
    static std::size_t train_packed_elements(const biaffine::detail::scorer_dims&, std::size_t, std::size_t) noexcept
    {
        return 0;
    }
};
static_assert(biaffine::detail::check_host_ops<user_backend, float>());
#else
using base = biaffine::detail::host_batch<biaffine::detail::eigen_backend<float>, float>;
struct user_batch : private base {
    using base::base;
    using base::acts;
    using base::carve;
    using base::carved_batch;
    using base::held_batch;
    using base::hold;
    using base::bilinear_left;
    using base::device_bytes;
    using base::dropout;
    using base::name;
    using base::operations;
    using base::outputs_backward;
    using base::packed_elements;
    using base::prepare;
    using base::prepared_version;
    using base::project;
    using base::projections_backward;
    using base::reads_items;
    using base::train_packed_elements;
};
static_assert(biaffine::detail::check_backend<user_batch, float>());
#endif

}  // namespace probe

int main() { return 0; }
