// python/src/layers.cpp - the budget class, what splits and batches documents
// (lazy_split, cap_split_lengths, minibatch_by_padded_size) and the bilinear
// kernel alone (pairwise_bilinear).
#include "common.hpp"

#include <biaffine/batching.hpp>
#include <biaffine/lazy_split.hpp>
#include <biaffine/pairwise_bilinear.hpp>

namespace biaffine_py {
namespace {

// ------------------------------------------------------ the bilinear kernel

// The kernel takes owning tracked tensors: the operands are copied once
// (documented; the kernel alone is for tests and experiments).
template <class T, std::size_t N>
biaffine::tensor<T, N> to_tensor(const py::handle& obj, const char* what)
{
    auto a = exact_array<T>(obj, std::string("pairwise_bilinear: ") + what, -1, "");
    if (a.ndim() != static_cast<py::ssize_t>(N)) {
        throw_shape(std::string("pairwise_bilinear: ") + what + " must be " + std::to_string(N) + "-d, got " +
                    std::to_string(a.ndim()) + " dimensions");
    }
    std::array<std::size_t, N> shape{};
    for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(a.shape(static_cast<py::ssize_t>(i)));
    biaffine::tensor<T, N> t = biaffine::tensor<T, N>::from_shape(shape);
    std::copy(a.data(), a.data() + a.size(), t.data());
    return t;
}

template <class T>
py::array bilinear_forward(const py::handle& u, const py::handle& v, const py::handle& w, bool bu, bool bv)
{
    auto tu = to_tensor<T, 3>(u, "u");
    auto tv = to_tensor<T, 3>(v, "v");
    auto tw = to_tensor<T, 3>(w, "weight");
    biaffine::tensor<T, 4> y;
    {
        py::gil_scoped_release release;
        y = biaffine::pairwise_bilinear(tu, tv, tw, bu, bv);
    }
    return adopt(std::move(y));
}

template <class T>
py::tuple bilinear_backward(const py::handle& u, const py::handle& v, const py::handle& w, bool bu, bool bv,
                            const py::handle& dy, const py::handle& dweight)
{
    auto tu = to_tensor<T, 3>(u, "u");
    auto tv = to_tensor<T, 3>(v, "v");
    auto tw = to_tensor<T, 3>(w, "weight");
    auto tdy = to_tensor<T, 4>(dy, "dy");
    auto out = exact_array<T>(dweight, "pairwise_bilinear: dweight", -1, "");
    if (!out.writeable()) throw py::value_error("pairwise_bilinear: dweight must be writable (it accumulates)");
    auto tdw = to_tensor<T, 3>(dweight, "dweight");
    std::pair<biaffine::tensor<T, 3>, biaffine::tensor<T, 3>> d;
    {
        py::gil_scoped_release release;
        d = biaffine::pairwise_bilinear_backward(tu, tv, tw, bu, bv, tdy, tdw);
    }
    std::copy(tdw.data(), tdw.data() + tdw.size(), out.mutable_data());
    return py::make_tuple(adopt(std::move(d.first)), adopt(std::move(d.second)));
}

}  // namespace

void bind_budget(py::module_& m)
{
    py::class_<biaffine::budget>(m, "budget", "A batch budget: budget.items(n), budget.bytes(b), budget.megabytes(mb).")
        .def_static("items", [](const py::handle& n) { return biaffine::budget::items(read_count(n, "budget.items")); },
                    py::arg("n"), "At most n padded items (splits x longest split) per batch: spaCy's rule.")
        .def_static("bytes", [](const py::handle& b) { return biaffine::budget::bytes(read_count(b, "budget.bytes")); },
                    py::arg("b"), "At most b bytes of the scorer's reported working set per batch.")
        .def_static("megabytes", &budget_megabytes, py::arg("mb"),
                    "mb MiB (2**20 bytes; an int or a float, rounded down to whole bytes).")
        .def("__eq__", [](const biaffine::budget& a, const biaffine::budget& b) {
            return a.kind == b.kind && a.value == b.value;
        })
        .def("__hash__", [](const biaffine::budget& b) {
            return py::hash(py::make_tuple(static_cast<int>(b.kind), b.value));
        })
        .def_property_readonly("kind", [](const biaffine::budget& b) {
            return b.kind == biaffine::budget_kind::bytes ? "bytes" : "items";
        })
        .def_property_readonly("value", [](const biaffine::budget& b) { return b.value; })
        .def("__repr__", [](const biaffine::budget& b) {
            return std::string("budget.") + (b.kind == biaffine::budget_kind::bytes ? "bytes(" : "items(") +
                   std::to_string(b.value) + ")";
        });
}

void bind_layers(py::module_& m)
{
    m.def("lazy_split",
          [](const py::handle& scores, const py::handle& max_len) {
              const std::size_t max_length = read_count(max_len, "lazy_split: max_length");
              return with_scores_1d(scores, "lazy_split", [&](auto* d, std::size_t n) {
                  py::gil_scoped_release release;
                  return biaffine::lazy_split(d, n, max_length);
              });
          },
          py::arg("sent_start_scores"), py::arg("max_length"));
    m.def("cap_split_lengths",
          [](const py::handle& lengths, const py::handle& max_len, const py::object& scores) {
              const std::size_t max_length = read_count(max_len, "cap_split_lengths: max_length");
              std::vector<std::size_t> ls = read_size_list(lengths, "cap_split_lengths: lengths");
              if (scores.is_none()) return biaffine::cap_split_lengths(ls, max_length, nullptr);
              return with_scores_1d(scores, "cap_split_lengths", [&](auto* d, std::size_t n) {
                  auto view = xt::adapt(d, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
                  return biaffine::cap_split_lengths(ls, max_length, view);
              });
          },
          py::arg("lengths"), py::arg("max_length"), py::arg("scores") = py::none());
    m.def("minibatch_by_padded_size",
          [](const py::handle& lengths, const py::handle& size, const py::handle& buffer) {
              auto ls = read_size_list(lengths, "minibatch_by_padded_size: lengths");
              return biaffine::minibatch_by_padded_size(ls, read_count(size, "minibatch_by_padded_size: size"),
                                                        read_count(buffer, "minibatch_by_padded_size: buffer"));
          },
          py::arg("lengths"), py::arg("size"), py::arg("buffer") = 256);

    m.def("pairwise_bilinear",
          [](const py::handle& u, const py::handle& v, const py::handle& w, bool bu, bool bv) {
              if (dtype_of(u).is(py::dtype::of<double>())) return bilinear_forward<double>(u, v, w, bu, bv);
              return bilinear_forward<float>(u, v, w, bu, bv);
          },
          py::arg("u"), py::arg("v"), py::arg("weight"), py::arg("bias_u"), py::arg("bias_v"),
          "The kernel alone: u, v [b, L, h], weight [o, h+bias_u, h+bias_v] -> [b, L, L, o] (operands copied).");
    m.def("pairwise_bilinear_backward",
          [](const py::handle& u, const py::handle& v, const py::handle& w, bool bu, bool bv, const py::handle& dy,
             const py::handle& dw) {
              if (dtype_of(u).is(py::dtype::of<double>())) return bilinear_backward<double>(u, v, w, bu, bv, dy, dw);
              return bilinear_backward<float>(u, v, w, bu, bv, dy, dw);
          },
          py::arg("u"), py::arg("v"), py::arg("weight"), py::arg("bias_u"), py::arg("bias_v"), py::arg("dy"),
          py::arg("dweight"), "Returns (du, dv) and accumulates into dweight in place.");

}

}  // namespace biaffine_py
