// Compile-only probe (nvcc): a skeleton CUDA backend type, operations without
// bodies, satisfies check_backend (detail/compute/interface.hpp) under the
// device compiler; docs/architecture.md has the design it stands for. Run by
// ctest (backend_contract_cuda_skeleton) where nvcc is found; no GPU needed.
#include <cublas_v2.h>
#include "biaffine/detail/compute/interface.hpp"
namespace sk {
using namespace biaffine;
using namespace biaffine::detail;
template <class T>
struct cuda_backend {
    static constexpr const char* name = "cuda";
    static constexpr const char* operations = "cuBLAS (skeleton)";
    static constexpr bool reads_items = false;
    static std::size_t packed_elements(const scorer_dims&, std::size_t) noexcept { return 0; }
    static std::size_t train_packed_elements(const scorer_dims&, std::size_t, std::size_t) noexcept { return 0; }
    static void projections(const scorer_dims&, const weights_ref<T>&, const T*, std::size_t, T*, T*, T*) {}
    static void bilinear_left(const scorer_dims&, const T*, const T*, std::size_t, T*, T*) {}
    static std::size_t score_group_rows(const scorer_dims&) noexcept { return static_cast<std::size_t>(-1); }
    template <class Each>
    static void bilinear_scores(const scorer_dims&, const T*, const T*, const std::size_t*, std::size_t, T*, bool, T*, Each&&) {}
    static void split_scores(const_row_map<T>, const T*, std::size_t, score_view<T>, T*) {}
    static void split_scores_backward(const_row_map<T>, const T*, std::size_t, score_view<const T>, row_map<T>, T*, T*) {}
    static void head_scores(const_row_map<T>, const T*, const std::size_t*, std::size_t, seq_view<T>) {}
    static void head_scores_backward(const_row_map<T>, const T*, const std::size_t*, std::size_t, seq_view<const T>, row_map<T>, T*) {}
    static void bilinear_left_backward(const scorer_dims&, const T*, const T*, std::size_t, const T*, T*, T*, T*) {}
    template <class Items>
    static void input_backward(const scorer_dims&, const weights_ref<T>&, const grads_ref<T>&, const Items&, const std::size_t*, std::size_t, const relu_ref<T>&, T*, T*, T*, T*, span<const seq_view<T>>) {}
};
static_assert(check_backend<cuda_backend<float>, float>());
static_assert(check_backend<cuda_backend<double>, double>());
}
int main() { cublasHandle_t h; return cublasCreate(&h) == CUBLAS_STATUS_SUCCESS ? 0 : 0; }
