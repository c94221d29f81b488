// Compile-only probe (nvcc): a skeleton CUDA backend, the batch-level
// operations without bodies (a device backend implements them itself, not
// through host_batch), satisfies check_backend (detail/compute/
// interface.hpp) under the device compiler; docs/architecture.md has the
// design it stands for. Run by ctest (backend_contract_cuda_skeleton) where nvcc is found;
// no GPU needed.
#include <cublas_v2.h>
#include "biaffine/detail/compute/interface.hpp"
namespace sk {
using namespace biaffine;
using namespace biaffine::detail;

// The batch-level object a scorer would hold: its context (cuBLAS handle,
// stream, the device copy of the weights and its version) lives here.
template <class T>
class cuda_backend {
public:
    static constexpr const char* name = "cuda";
    static constexpr const char* operations = "cuBLAS (skeleton): grouped GEMM per split, one GEMM per projection";
    static constexpr bool reads_items = false;
    explicit cuda_backend(const scorer_dims& d) : d_(d) {}
    std::uint64_t prepared_version() const noexcept { return version_; }
    // Would copy (or pack) the weights to the device.
    void prepare(std::uint64_t version, const weights_ref<T>&) { version_ = version; }
    // Would count U, V, T and one group's scores on the device.
    std::uint64_t device_bytes(std::size_t, std::size_t, mode) const noexcept { return 0; }
    std::size_t packed_elements(std::size_t) const noexcept { return 0; }
    std::size_t train_packed_elements(std::size_t, std::size_t) const noexcept { return 0; }
    std::size_t eval_t_rows(std::size_t N, std::size_t) const noexcept { return N; }
    void watch(bool) noexcept {}
    template <class Kind, class Items, class Heads, class Dest, class Done>
    void predict(const Items&, const Heads&, Dest&&, Done&&) const {}
    template <class Kind>
    std::uint64_t predict_scratch_bytes(std::size_t, std::size_t) const noexcept { return 0; }
    template <class Items>
    void project(const Items&, const std::size_t*, std::size_t, T*, T*, T*) const {}
    void dropout(double, std::uint64_t, T*, T*, const std::size_t*, std::size_t) const {}
    void bilinear_left(const T*, std::size_t, T*, T*) const {}
    template <class Kind, class Dest, class Keep, class Each>
    void score_outputs(const T*, const T*, const std::size_t*, std::size_t, const std::size_t*, T*, bool, bool, T*,
                       Dest&&, Keep&&, Each&&) const {}
    template <class Kind>
    void softmax(typename Kind::template view<T>) const {}
    template <class Kind>
    void softmax_backward(typename Kind::template view<const T>, typename Kind::template view<const T>,
                          typename Kind::template view<T>) const {}
    template <class Kind, class Grad, class Kept>
    void outputs_backward(const std::size_t*, std::size_t, const std::size_t*, const T*, const T*, span<const Grad>,
                          bool, Kept&&, T*, T*, T*, T*, T*) const {}
    template <class Items>
    void projections_backward(const Items&, const std::size_t*, std::size_t, const T*, const T*, T*, T*, T*, double,
                              const grads_ref<T>&, span<const seq_view<T>>, T*) const {}

private:
    scorer_dims d_;
    std::uint64_t version_ = 0;
};
static_assert(check_backend<cuda_backend<float>, float>());
static_assert(check_backend<cuda_backend<double>, double>());
}
int main() { cublasHandle_t h; return cublasCreate(&h) == CUBLAS_STATUS_SUCCESS ? 0 : 0; }
