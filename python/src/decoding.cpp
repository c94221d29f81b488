// python/src/decoding.cpp - decoders (mst, argmax, eisner), labels at heads,
// the fused losses and is_tree, on numpy arrays.
#include "common.hpp"

#include <biaffine/decode.hpp>
#include <biaffine/loss.hpp>

namespace biaffine_py {
namespace {

// --------------------------------------------------------------- decoding

template <class F>
py::array_t<std::int64_t> decode(const py::handle& obj, const char* where, F&& f)
{
    // (ml_dtypes.bfloat16 arrays, e.g. predict(output='bfloat16'), decode as
    // their exact float values; uint16 bits are refused as any integer dtype.)
    if (!py::isinstance<py::array>(obj)) {
        throw py::type_error(std::string(where) + ": expected a 2-d numpy array of float32 or float64 scores, got " +
                             type_of(obj));
    }
    auto a = py::reinterpret_borrow<py::array>(obj);
    auto run = [&](auto tag) {
        using T = decltype(tag);
        const auto [n, stride] = square_rows(a, sizeof(T), where);
        const T* data = static_cast<const T*>(a.data());
        std::vector<std::size_t> h;
        {
            py::gil_scoped_release release;
            h = f(data, n, stride);
        }
        return to_int64(h);
    };
    if (a.dtype().is(py::dtype::of<float>())) return run(float{});
    if (a.dtype().is(py::dtype::of<double>())) return run(double{});
    if (is_ml_dtypes_bfloat16(a.dtype())) return run(biaffine::bfloat16{});
    throw py::type_error(std::string(where) + ": expected dtype float32, float64 or bfloat16 (ml_dtypes), got " +
                         dtype_name(a.dtype()));
}

// ------------------------------------------------------------------ losses

// cross_entropy_heads (Labels = false) / cross_entropy_labels: (loss, [dY]).
template <bool Labels>
py::tuple cross_entropy(const py::handle& Y, const py::handle& gold, double scale)
{
    const char* where = Labels ? "cross_entropy_labels" : "cross_entropy_heads";
    if (py::isinstance<py::array>(Y) || !py::isinstance<py::sequence>(Y) || py::isinstance<py::str>(Y)) {
        throw py::type_error(std::string(where) + ": Y must be a list of numpy arrays (one per split), got " +
                             type_of(Y));
    }
    auto seq = py::reinterpret_borrow<py::sequence>(Y);
    heads_t g = read_int_lists(gold, std::string(where) + (Labels ? ": gold_labels" : ": gold_heads"));
    auto run = [&](auto tag) {
        using T = decltype(tag);
        split_arrays<T> ys = read_split_arrays<T>(seq, std::string(where) + ": Y");
        std::pair<double, biaffine::score_list<T>> r;
        {
            py::gil_scoped_release release;
            if constexpr (Labels) {
                r = biaffine::cross_entropy_labels<T>(ys.views, g, scale);
            } else {
                r = biaffine::cross_entropy_heads<T>(ys.views, g, scale);
            }
        }
        return py::make_tuple(r.first, adopt_scores(r.second));
    };
    if (first_is_float64(seq)) return run(double{});
    return run(float{});
}

py::array_t<std::int64_t> labels_at_heads(const py::handle& scores, const py::handle& heads)
{
    if (!py::isinstance<py::array>(scores)) {
        throw py::type_error("labels_at_heads: scores must be a numpy array [n, n, o] of float32 or float64, got " +
                             type_of(scores));
    }
    const auto h = read_int_row(heads, "labels_at_heads: heads");
    auto a = py::reinterpret_borrow<py::array>(scores);
    auto run = [&](auto tag) {
        using T = decltype(tag);
        // A 2-d [n, n] matrix (arc scores) would read as one label, every
        // answer 0: refused, as the contract is a label scorer's [n, n, o].
        auto c = exact_array<T>(a, "labels_at_heads: scores", 3,
                                "[n, n, o] (a label scorer's scores; a one-label [n, n] matrix is scores[..., None])");
        std::vector<std::size_t> shape(c.shape(), c.shape() + c.ndim());
        auto x = xt::adapt(c.data(), static_cast<std::size_t>(c.size()), xt::no_ownership(), shape);
        const auto view = biaffine::as_score_view(x);
        std::vector<std::size_t> out;
        {
            py::gil_scoped_release release;
            out = biaffine::labels_at_heads(view, h);
        }
        return to_int64(out);
    };
    if (a.dtype().is(py::dtype::of<double>())) return run(double{});
    if (a.dtype().is(py::dtype::of<float>())) return run(float{});
    throw py::type_error("labels_at_heads: expected dtype float32 or float64, got " + dtype_name(a.dtype()));
}

}  // namespace

void bind_decoding(py::module_& m)
{
    m.def("mst_heads",
          [](const py::handle& s) {
              return decode(s, "mst_heads", [](auto* d, std::size_t n, std::size_t rs) { return biaffine::mst_heads(d, n, rs); });
          },
          py::arg("scores"));
    m.def("argmax_heads",
          [](const py::handle& s) {
              return decode(s, "argmax_heads",
                            [](auto* d, std::size_t n, std::size_t rs) { return biaffine::argmax_heads(d, n, rs); });
          },
          py::arg("scores"));
    m.def("eisner_heads",
          [](const py::handle& s) {
              return decode(s, "eisner_heads",
                            [](auto* d, std::size_t n, std::size_t rs) { return biaffine::eisner_heads(d, n, rs); });
          },
          py::arg("scores"),
          "The best projective tree with one root: scores [n, n] (rows dependents, columns heads) -> heads [n] "
          "(int64).");
    m.def("labels_at_heads", &labels_at_heads, py::arg("scores"), py::arg("heads"),
          "The best label at each token's given head: scores [n, n, o], heads [n] -> labels [n] (int64).");
    m.def("cross_entropy_heads",
          [](const py::handle& Y, const py::handle& gold, double scale) { return cross_entropy<false>(Y, gold, scale); },
          py::arg("Y"), py::arg("gold_heads"), py::arg("scale") = 1.0,
          "Loss and gradient over arc logits: Y [[n, n]] per split, gold_heads [[n]] per split -> (loss, [dY]).");
    m.def("cross_entropy_labels",
          [](const py::handle& Y, const py::handle& gold, double scale) { return cross_entropy<true>(Y, gold, scale); },
          py::arg("Y"), py::arg("gold_labels"), py::arg("scale") = 1.0,
          "Loss and gradient over label logits at given heads: Y [[n, o]], gold_labels [[n]] -> (loss, [dY]).");
    m.def("is_tree", [](const py::handle& h) { return biaffine::is_tree(read_size_list(h, "is_tree: heads")); }, py::arg("heads"));
}

}  // namespace biaffine_py
