// python/src/tree_crf.cpp - the tree CRF of include/biaffine/tree_crf.hpp on
// numpy arrays: log Z, the arc marginals and MBR heads of one [n, n] array
// or of a list of them (one per split), and the fused tree CRF loss over a
// list of splits. `projective` (keyword, True / False) picks the tree kind.
#include "common.hpp"

#include <biaffine/tree_crf.hpp>

namespace biaffine_py {
namespace {

biaffine::tree_kind read_tree_kind(const py::handle& projective, const std::string& where)
{
    if (!is_bool(projective)) {
        throw py::type_error(where + ": projective must be True or False, got " + type_of(projective));
    }
    return projective.cast<bool>() ? biaffine::tree_kind::projective : biaffine::tree_kind::non_projective;
}

// Inside a catch: the C++ error again, its class kept, "split k: " in front
// (the form of the C++ list functions' messages).
[[noreturn]] void rethrow_in_split(std::size_t k)
{
    const std::string at = "split " + std::to_string(k) + ": ";
    try {
        throw;
    } catch (const biaffine::head_error& e) {
        throw biaffine::head_error(at + e.what());
    } catch (const biaffine::length_error& e) {
        throw biaffine::length_error(at + e.what());
    } catch (const biaffine::shape_error& e) {
        throw biaffine::shape_error(at + e.what());
    } catch (const biaffine::error& e) {
        throw biaffine::error(at + e.what());
    } catch (const std::domain_error& e) {
        throw std::domain_error(at + e.what());
    }
}

// `scores` one [n, n] array (-> wrap(f(view))) or a list of them (-> a list,
// every array of the first one's dtype, errors naming the split). f runs
// without the GIL, wrap with it. Rows may be strided, as the decoders take.
template <class F, class Wrap>
py::object each_split(const py::handle& scores, const std::string& where, F&& f, Wrap&& wrap)
{
    const bool one = py::isinstance<py::array>(scores);
    if (!one && (!py::isinstance<py::sequence>(scores) || py::isinstance<py::str>(scores))) {
        throw py::type_error(where + ": scores must be a 2-d numpy array [n, n] of float32 or float64, or a list "
                                     "of them (one per split), got " +
                             type_of(scores));
    }
    std::vector<py::object> items;  // kept alive while the GIL is released
    if (one) {
        items.push_back(py::reinterpret_borrow<py::object>(scores));
    } else {
        for (py::handle x : py::reinterpret_borrow<py::sequence>(scores)) {
            items.push_back(py::reinterpret_borrow<py::object>(x));
        }
    }
    const auto name = [&](std::size_t k) { return one ? where : where + ": scores[" + std::to_string(k) + "]"; };
    for (std::size_t k = 0; k < items.size(); ++k) {
        if (!py::isinstance<py::array>(items[k])) {
            throw py::type_error(name(k) + ": expected a 2-d numpy array of float32 or float64 scores, got " +
                                 type_of(items[k]));
        }
    }
    auto run = [&](auto tag) -> py::object {
        using T = decltype(tag);
        std::vector<biaffine::score_view<const T>> views;
        for (std::size_t k = 0; k < items.size(); ++k) {
            auto a = py::reinterpret_borrow<py::array>(items[k]);
            if (!a.dtype().is(py::dtype::of<T>())) {
                throw py::type_error(name(k) + ": expected dtype " + type_name<T>() + " (" +
                                     (k == 0 ? "or float64" : "the first split's") + "), got " +
                                     dtype_name(a.dtype()));
            }
            const auto [n, stride] = square_rows(a, sizeof(T), name(k));
            views.push_back({static_cast<const T*>(a.data()), n, 1, static_cast<std::ptrdiff_t>(stride)});
        }
        std::vector<std::decay_t<decltype(f(views.front()))>> results;
        results.reserve(views.size());
        {
            py::gil_scoped_release release;
            for (std::size_t k = 0; k < views.size(); ++k) {
                try {
                    results.push_back(f(views[k]));
                } catch (...) {
                    if (one) throw;
                    rethrow_in_split(k);
                }
            }
        }
        if (one) return wrap(std::move(results.front()));
        py::list out;
        for (auto& r : results) out.append(wrap(std::move(r)));
        return std::move(out);
    };
    if (!items.empty() && py::reinterpret_borrow<py::array>(items[0]).dtype().is(py::dtype::of<double>())) {
        return run(double{});
    }
    return run(float{});
}

py::object log_partition(const py::handle& scores, const py::handle& projective)
{
    const std::string where = "tree_log_partition";
    const auto kind = read_tree_kind(projective, where);
    return each_split(
        scores, where, [kind](auto view) { return biaffine::tree_log_partition(view, kind); },
        [](double z) { return py::object(py::float_(z)); });
}

py::object marginals(const py::handle& scores, const py::handle& projective)
{
    const std::string where = "tree_marginals";
    const auto kind = read_tree_kind(projective, where);
    return each_split(
        scores, where,
        [kind](auto view) {
            using T = std::remove_const_t<std::remove_pointer_t<decltype(view.data)>>;
            auto p = biaffine::score_tensor<T>::from_shape({view.n, view.n});
            const biaffine::score_view<T> out{p.data(), view.n, 1, static_cast<std::ptrdiff_t>(view.n)};
            biaffine::tree_marginals(view, out, kind);
            return p;
        },
        [](auto&& p) { return py::object(adopt(std::move(p))); });
}

py::object mbr(const py::handle& scores, const py::handle& projective)
{
    const std::string where = "mbr_heads";
    const auto kind = read_tree_kind(projective, where);
    return each_split(
        scores, where, [kind](auto view) { return biaffine::mbr_heads(view, kind); },
        [](const std::vector<std::size_t>& h) { return py::object(to_int64(h)); });
}

// tree_crf_loss over a list of splits: (loss, [dY]), as cross_entropy_heads.
py::tuple crf_loss(const py::handle& Y, const py::handle& gold, double scale, const py::handle& projective)
{
    const std::string where = "tree_crf_loss";
    const auto kind = read_tree_kind(projective, where);
    if (py::isinstance<py::array>(Y) || !py::isinstance<py::sequence>(Y) || py::isinstance<py::str>(Y)) {
        throw py::type_error(where + ": Y must be a list of numpy arrays (one [n, n] per split), got " + type_of(Y));
    }
    auto seq = py::reinterpret_borrow<py::sequence>(Y);
    const heads_t g = read_int_lists(gold, where + ": gold_heads");
    auto run = [&](auto tag) {
        using T = decltype(tag);
        split_arrays<T> ys = read_split_arrays<T>(seq, where + ": Y");
        std::pair<double, biaffine::score_list<T>> r;
        {
            py::gil_scoped_release release;
            r = biaffine::tree_crf_loss<T>(ys.views, g, kind, scale);
        }
        return py::make_tuple(r.first, adopt_scores(r.second));
    };
    if (first_is_float64(seq)) return run(double{});
    return run(float{});
}

}  // namespace

void bind_tree_crf(py::module_& m)
{
    m.def("tree_log_partition", &log_partition, py::arg("scores"), py::kw_only(), py::arg("projective") = false,
          "log Z over the trees with one root (projective: Eisner's trees): scores [n, n] -> float, or a list "
          "of them -> a list.");
    m.def("tree_marginals", &marginals, py::arg("scores"), py::kw_only(), py::arg("projective") = false,
          "Arc marginals P(head(m) = h), rows summing to 1: scores [n, n] -> [n, n] of the same dtype, or a list "
          "of them -> a list.");
    m.def("mbr_heads", &mbr, py::arg("scores"), py::kw_only(), py::arg("projective") = false,
          "Minimum-Bayes-risk heads: the tree maximising the sum of its arcs' marginals: scores [n, n] -> heads "
          "[n] (int64), or a list of them -> a list.");
    m.def("tree_crf_loss", &crf_loss, py::arg("Y"), py::arg("gold_heads"), py::arg("scale") = 1.0, py::kw_only(),
          py::arg("projective") = false,
          "Tree CRF loss and gradient over arc logits: Y [[n, n]] per split, gold_heads [[n]] per split (-1: "
          "unknown) -> (loss, [dY]).");
}

}  // namespace biaffine_py
