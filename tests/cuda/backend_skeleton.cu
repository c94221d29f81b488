// Compile-only probe (nvcc): a skeleton CUDA backend, the batch-level
// operations without bodies (a device backend implements them itself, not
// through host_batch) and its batch in device memory, satisfies check_backend (detail/compute/
// interface.hpp) under the device compiler; docs/architecture.md has the
// design it stands for. Run by ctest (backend_contract_cuda_skeleton) where nvcc is found;
// no GPU needed.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <new>

#include "biaffine/detail/compute/interface.hpp"
namespace sk {
using namespace biaffine;
using namespace biaffine::detail;

// A batch's activations on the device: U, V, T and the kept outputs in
// one allocation. The scorer holds the object and passes the handles on:
// batch_pointers holding device addresses it could not read.
struct device_free {
    void operator()(void* p) const noexcept { cudaFree(p); }
};
template <class T>
class device_batch {
public:
    device_batch() = default;
    device_batch(const scorer_dims& d, std::size_t N, std::size_t ys)
    {
        const std::size_t nu = N * d.hu(), nv = N * d.hv(), nt = N * d.labels * d.hv();
        void* p = nullptr;
        if (cudaMalloc(&p, (nu + nv + nt + ys) * sizeof(T)) != cudaSuccess) throw std::bad_alloc();
        block_.reset(p);
        a_.u = static_cast<T*>(p);
        a_.v = a_.u + nu;
        a_.t = a_.v + nv;
        a_.ys = ys == 0 ? nullptr : a_.t + nt;
    }
    const batch_pointers<T>& acts() const noexcept { return a_; }

private:
    std::unique_ptr<void, device_free> block_;
    batch_pointers<T> a_;
};
// One call's batch: a real backend would carve it from a device workspace
// sized by device_bytes; built in place, like the host's.
template <class T>
struct device_scratch : device_batch<T> {
    device_scratch(const scorer_dims& d, std::size_t N) : device_batch<T>(d, N, 0) {}
    device_scratch(const device_scratch&) = delete;
    device_scratch& operator=(const device_scratch&) = delete;
};

// The batch-level object a scorer would hold: its context (cuBLAS handle,
// stream, the device copy of the weights and its version) lives here.
template <class T>
class cuda_backend {
public:
    using acts = batch_pointers<T>;
    using held_batch = device_batch<T>;
    using carved_batch = device_scratch<T>;
    static constexpr const char* name = "cuda";
    static constexpr const char* operations = "cuBLAS (skeleton): grouped GEMM per split, one GEMM per projection";
    static constexpr bool reads_items = false;
    explicit cuda_backend(const scorer_dims& d) : d_(d) {}
    std::uint64_t prepared_version() const noexcept { return version_; }
    // Would copy (or pack) the weights to the device.
    void prepare(std::uint64_t version, const weights_ref<T>&) { version_ = version; }
    // Would count U, V, T (and the kept outputs) and one group's scores on the device.
    std::uint64_t device_bytes(std::size_t, std::size_t, mode) const noexcept { return 0; }
    std::size_t packed_elements(std::size_t) const noexcept { return 0; }
    std::size_t train_packed_elements(std::size_t, std::size_t) const noexcept { return 0; }
    held_batch hold(std::size_t N, std::size_t ys) const { return held_batch(d_, N, ys); }
    carved_batch carve(std::size_t N) const { return carved_batch(d_, N); }
    void watch(bool) noexcept {}
    template <class Kind, class Items, class Heads, class Dest, class Done>
    void predict(const Items&, const Heads&, Dest&&, Done&&) const {}
    template <class Kind>
    std::uint64_t predict_scratch_bytes(std::size_t, std::size_t) const noexcept { return 0; }
    template <class Items>
    void project(const Items&, const std::size_t*, std::size_t, const acts&, T*) const {}
    void dropout(double, std::uint64_t, const acts&, const std::size_t*, std::size_t) const {}
    void bilinear_left(const acts&, std::size_t, T*) const {}
    template <class Kind, class Dest, class Keep, class Each>
    void score_outputs(const acts&, const std::size_t*, std::size_t, const std::size_t*, bool, bool, T*, Dest&&,
                       Keep&&, Each&&) const {}
    template <class Kind, class Grad, class Kept>
    void outputs_backward(const acts&, const std::size_t*, std::size_t, const std::size_t*, span<const Grad>, bool,
                          Kept&&, T*, T*, T*, T*, T*) const {}
    template <class Items>
    void projections_backward(const Items&, const std::size_t*, std::size_t, const acts&, T*, T*, T*, double,
                              const grads_ref<T>&, span<const seq_view<T>>, T*) const {}

private:
    scorer_dims d_;
    std::uint64_t version_ = 0;
};
static_assert(check_backend<cuda_backend<float>, float>());
static_assert(check_backend<cuda_backend<double>, double>());
}
int main() { cublasHandle_t h; return cublasCreate(&h) == CUBLAS_STATUS_SUCCESS ? 0 : 0; }
