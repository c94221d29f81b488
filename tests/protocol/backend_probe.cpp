// Compile-only probes of the backend contract (detail/compute/interface.hpp),
// run by ctest through the compiler (tests/CMakeLists.txt, backend_contract_*):
// BIAFFINE_PROBE picks the case.
//   0  a user backend that reuses the Eigen backend's operations and names
//      itself: passes check_backend
//   1  a user backend with only its name, tunables and sizes: check_backend
//      fails with the contract's message naming projections, not a page of
//      templates
#include <cstddef>

#include "biaffine/detail/compute/eigen_backend.hpp"
#include "biaffine/detail/compute/interface.hpp"

#ifndef BIAFFINE_PROBE
#error "define BIAFFINE_PROBE (0 or 1)"
#endif

namespace probe {

#if BIAFFINE_PROBE == 0
struct user_backend : biaffine::detail::eigen_backend<float> {
    static constexpr const char* name = "user";
};
#else
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
#endif

static_assert(biaffine::detail::check_backend<user_backend, float>());

}  // namespace probe

int main() { return 0; }
