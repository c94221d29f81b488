// python/src/module.cpp - the `biaffine._biaffine` extension: the C++ pipeline
// on numpy arrays (see docs/api.md, "Python").
//
// Inputs: C-contiguous float32 / float64 numpy arrays of the scorer's dtype
// are read in place (the C++ layers get views of their buffers); anything
// else is refused with TypeError (dtype, not an array) or ValueError (not
// C-contiguous) / biaffine.ShapeError (number of dimensions) before any work.
// Outputs: the C++ score and gradient tensors are moved into a capsule that
// owns them, and the numpy array is a view of that capsule's buffer, so no
// copy is made and the arrays outlive the scorer. The GIL is released while
// C++ runs. Only the public API (<biaffine/biaffine.hpp>) is used.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <biaffine/biaffine.hpp>

#include "build_info.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// ----------------------------------------------------------------- errors

// The Python mirrors of include/biaffine/errors.hpp, created in PYBIND11_MODULE.
struct exception_types {
    PyObject* error = nullptr;
    PyObject* shape = nullptr;
    PyObject* length = nullptr;
    PyObject* budget = nullptr;
    PyObject* overflow = nullptr;
    PyObject* backprop = nullptr;
};
exception_types g_exc;

[[noreturn]] void throw_shape(const std::string& what)
{
    // Raised from the binding for rows of the bad-input table it checks
    // itself (e.g. as-view-rank): the same class the C++ layer would give.
    throw biaffine::shape_error(what);
}

std::string dtype_name(const py::dtype& d) { return std::string(py::str(py::handle(d))); }

template <class T>
const char* type_name()
{
    return sizeof(T) == sizeof(double) ? "float64" : "float32";
}

std::string type_of(const py::handle& h) { return py::str(py::type::of(h).attr("__name__")).cast<std::string>(); }

// Checks that `obj` is a C-contiguous numpy array of T with `ndim` dimensions
// (ndim < 0: any) and returns it without a copy.
template <class T>
py::array_t<T> exact_array(const py::handle& obj, const std::string& what, int ndim, const char* shape_hint)
{
    if (!py::isinstance<py::array>(obj)) {
        throw py::type_error(what + ": expected a numpy array (" + type_name<T>() + "), got " + type_of(obj));
    }
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (!a.dtype().is(py::dtype::of<T>())) {
        throw py::type_error(what + ": expected dtype " + type_name<T>() + ", got " + dtype_name(a.dtype()) +
                             " (convert with .astype(np." + type_name<T>() + "))");
    }
    if (ndim >= 0 && a.ndim() != ndim) {
        std::ostringstream os;
        os << what << ": expected a " << ndim << "-d array " << shape_hint << ", got " << a.ndim() << " dimensions";
        throw_shape(os.str());
    }
    if (!(a.flags() & py::array::c_style)) {
        throw py::value_error(what + ": the array is not C-contiguous; pass np.ascontiguousarray(...)");
    }
    return py::reinterpret_borrow<py::array_t<T>>(a);
}

// ------------------------------------------------------- owning outputs

// A numpy array that views `c`'s buffer and owns `c` through a capsule.
template <class C>
py::array adopt(C&& c)
{
    using V = std::remove_reference_t<C>;
    using T = typename V::value_type;
    std::vector<py::ssize_t> shape(c.shape().begin(), c.shape().end());
    if (c.size() == 0) return py::array_t<T>(shape);  // nothing to own
    auto* owned = new V(std::move(c));
    py::capsule owner(owned, [](void* p) { delete static_cast<V*>(p); });
    return py::array_t<T>(shape, owned->data(), owner);
}

// ------------------------------------------------------------- inputs

template <class T>
using doc_map = Eigen::Map<const biaffine::row_matrix<T>>;

// Documents as views: maps for C++, the arrays kept alive for Python.
template <class T>
struct doc_views {
    std::vector<py::object> keep;
    std::vector<doc_map<T>> maps;
};

template <class T>
doc_views<T> read_docs(const py::handle& docs, const char* what)
{
    if (py::isinstance<py::array>(docs) || !py::isinstance<py::sequence>(docs) || py::isinstance<py::str>(docs)) {
        throw py::type_error(std::string(what) + ": docs must be a list of 2-d numpy arrays [n_tokens, n_in], got " +
                             type_of(docs));
    }
    auto seq = py::reinterpret_borrow<py::sequence>(docs);
    doc_views<T> v;
    const std::size_t n = seq.size();
    v.keep.reserve(n);
    v.maps.reserve(n);
    for (std::size_t d = 0; d < n; ++d) {
        py::object o = seq[d];
        auto a = exact_array<T>(o, std::string(what) + ": docs[" + std::to_string(d) + "]", -1, "");
        if (a.ndim() != 2) {
            throw_shape("as_view: expected a 2-d array [n_tokens, n_in], got " + std::to_string(a.ndim()) +
                        " dimensions");
        }
        v.maps.emplace_back(a.data(), static_cast<Eigen::Index>(a.shape(0)), static_cast<Eigen::Index>(a.shape(1)));
        v.keep.push_back(std::move(a));
    }
    return v;
}

using lengths_t = std::vector<std::vector<long long>>;

lengths_t read_lengths(const py::handle& lengths, const char* what)
{
    if (!py::isinstance<py::sequence>(lengths) || py::isinstance<py::str>(lengths)) {
        throw py::type_error(std::string(what) + ": split_lengths must be a list of integer lists, got " +
                             type_of(lengths));
    }
    lengths_t out;
    auto seq = py::reinterpret_borrow<py::sequence>(lengths);
    out.reserve(seq.size());
    for (std::size_t d = 0; d < seq.size(); ++d) {
        py::object l = seq[d];
        if (!py::isinstance<py::sequence>(l) && !py::isinstance<py::array>(l)) {
            throw py::type_error(std::string(what) + ": split_lengths[" + std::to_string(d) +
                                 "] must be a list of integers, got " + type_of(l));
        }
        std::vector<long long> row;
        for (py::handle x : l) {
            if (py::isinstance<py::float_>(x) || !py::hasattr(x, "__index__")) {
                throw py::type_error(std::string(what) + ": split_lengths[" + std::to_string(d) +
                                     "] must hold integers, got " + type_of(x));
            }
            row.push_back(x.attr("__index__")().cast<long long>());
        }
        out.push_back(std::move(row));
    }
    return out;
}

// ------------------------------------------------------------ options

struct run_options {
    std::optional<biaffine::budget> budget;  // none: one batch, no batcher
    biaffine::batch_options batch;
    bool pad = false;  // with_pad_seq_unpad_matrix (the reference's padding)
};

biaffine::oversize_policy read_oversize(const std::string& s)
{
    if (s == "run_alone") return biaffine::oversize_policy::run_alone;
    if (s == "throw") return biaffine::oversize_policy::throw_error;
    throw py::value_error("oversize must be 'run_alone' or 'throw', got '" + s + "'");
}

run_options read_options(const py::object& budget, long long threads, long long buffer, const std::string& oversize,
                         bool pad)
{
    run_options o;
    if (!budget.is_none()) {
        if (py::isinstance<biaffine::budget>(budget)) {
            o.budget = budget.cast<biaffine::budget>();
        } else if (py::isinstance<py::int_>(budget) && !py::isinstance<py::bool_>(budget)) {
            o.budget = biaffine::budget::bytes(budget.cast<std::uint64_t>());
        } else {
            throw py::type_error("budget must be a biaffine.budget, an int (bytes) or None, got " + type_of(budget));
        }
    }
    if (threads < 0) throw py::value_error("threads must be at least 1, got " + std::to_string(threads));
    if (buffer < 0) throw py::value_error("buffer must be positive, got " + std::to_string(buffer));
    o.batch.threads = static_cast<std::size_t>(threads);
    o.batch.buffer = static_cast<std::size_t>(buffer);
    o.batch.oversize = read_oversize(oversize);
    o.pad = pad;
    return o;
}

// Runs `f(model)` with the composition the options ask for:
// with_splits([with_minibatch_by_padded_size(] [with_pad_seq_unpad_matrix(] scorer [)] [)]).
// The model lives on the heap (shared) so that a backprop may keep it.
template <class T, class F>
auto with_model(biaffine::biaffine_scorer<T>& scorer, const run_options& o, F&& f)
{
    using S = biaffine::biaffine_scorer<T>;
    if (o.budget) {
        if (o.pad) {
            auto m = std::make_shared<decltype(biaffine::with_splits(biaffine::with_minibatch_by_padded_size(
                biaffine::with_pad_seq_unpad_matrix(std::declval<S&>()), *o.budget, o.batch)))>(
                biaffine::with_splits(biaffine::with_minibatch_by_padded_size(
                    biaffine::with_pad_seq_unpad_matrix(scorer), *o.budget, o.batch)));
            return f(m);
        }
        auto m = std::make_shared<decltype(biaffine::with_splits(
            biaffine::with_minibatch_by_padded_size(std::declval<S&>(), *o.budget, o.batch)))>(
            biaffine::with_splits(biaffine::with_minibatch_by_padded_size(scorer, *o.budget, o.batch)));
        return f(m);
    }
    if (o.pad) {
        auto m = std::make_shared<decltype(biaffine::with_splits(biaffine::with_pad_seq_unpad_matrix(std::declval<S&>())))>(
            biaffine::with_splits(biaffine::with_pad_seq_unpad_matrix(scorer)));
        return f(m);
    }
    auto m = std::make_shared<decltype(biaffine::with_splits(std::declval<S&>()))>(biaffine::with_splits(scorer));
    return f(m);
}

template <class T>
py::list adopt_scores(biaffine::score_list<T>& Y)
{
    py::list out;
    for (auto& y : Y) out.append(adopt(std::move(y)));
    Y.clear();
    return out;
}

// --------------------------------------------------------------- backprop

// What forward() returns as the second element: callable once with the
// per-split score gradients, returns the per-document dX.
template <class T>
class py_backprop {
public:
    using doc_grads = biaffine::tracked_vector<biaffine::tensor<T, 2>>;
    using fn = std::function<doc_grads(const std::vector<biaffine::score_view<const T>>&)>;

    py_backprop(fn f, py::object scorer, std::vector<py::object> docs)
        : f_(std::move(f)), scorer_(std::move(scorer)), docs_(std::move(docs))
    {
    }

    py::list call(const py::handle& dY)
    {
        if (!f_) {
            // The C++ callback gives the message; keep the object spent.
            throw biaffine::backprop_error(called_ ? "backprop called a second time: each forward's callback runs once"
                                                   : "backprop called on an empty callback");
        }
        if (py::isinstance<py::array>(dY) || !py::isinstance<py::sequence>(dY) || py::isinstance<py::str>(dY)) {
            throw py::type_error("backprop: dY must be a list of numpy arrays (one per split), got " + type_of(dY));
        }
        auto seq = py::reinterpret_borrow<py::sequence>(dY);
        std::vector<py::array_t<T>> keep;
        std::vector<biaffine::score_view<const T>> views;
        keep.reserve(seq.size());
        views.reserve(seq.size());
        for (std::size_t k = 0; k < seq.size(); ++k) {
            auto a = exact_array<T>(seq[k], "backprop: dY[" + std::to_string(k) + "]", -1, "");
            std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
            auto x = xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
            try {
                views.push_back(biaffine::as_score_view(x));
            } catch (const biaffine::shape_error& e) {
                throw biaffine::shape_error("split gradient " + std::to_string(k) + ": " + e.what());
            }
            keep.push_back(std::move(a));
        }
        fn f = std::move(f_);
        f_ = nullptr;
        called_ = true;
        doc_grads dX;
        {
            py::gil_scoped_release release;
            dX = f(views);
        }
        // The documents and the scorer may go now.
        docs_.clear();
        scorer_ = py::none();
        py::list out;
        for (auto& d : dX) out.append(adopt(std::move(d)));
        return out;
    }
    bool live() const { return static_cast<bool>(f_); }

private:
    fn f_;
    py::object scorer_;
    std::vector<py::object> docs_;
    bool called_ = false;
};

template <class T>
class py_padded_backprop {
public:
    using fn = std::function<biaffine::tensor<T, 3>(const biaffine::score_array<T>&)>;
    py_padded_backprop(fn f, py::object scorer, py::object x) : f_(std::move(f)), scorer_(std::move(scorer)), x_(std::move(x)) {}

    py::array call(const py::handle& dy)
    {
        if (!f_) {
            throw biaffine::backprop_error(called_ ? "backprop called a second time: each forward's callback runs once"
                                                   : "backprop called on an empty callback");
        }
        auto a = exact_array<T>(dy, "forward_padded backprop: dy", -1, "");
        // score_array is an owning xarray: the padded gradient is copied once
        // (the padded interface is the reference's, for parity and tests).
        std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
        biaffine::score_array<T> d = biaffine::score_array<T>::from_shape(shape);
        std::copy(a.data(), a.data() + a.size(), d.data());
        fn f = std::move(f_);
        f_ = nullptr;
        called_ = true;
        biaffine::tensor<T, 3> dx;
        {
            py::gil_scoped_release release;
            dx = f(d);
        }
        x_ = py::none();
        scorer_ = py::none();
        return adopt(std::move(dx));
    }

private:
    fn f_;
    py::object scorer_;
    py::object x_;
    bool called_ = false;
};

// ----------------------------------------------------------------- scorer

template <class T>
using scorer_t = biaffine::biaffine_scorer<T>;

template <class T>
py::array param_view(const py::object& self, T* data, const std::vector<std::size_t>& shape)
{
    std::vector<py::ssize_t> s(shape.begin(), shape.end());
    return py::array_t<T>(s, data, self);  // a writable view; `self` stays alive with it
}

template <class T>
py::list predict(py::object self, const py::handle& docs, const py::handle& lengths, const py::object& budget,
                 long long threads, long long buffer, const std::string& oversize, bool pad)
{
    auto& s = self.cast<scorer_t<T>&>();
    run_options o = read_options(budget, threads, buffer, oversize, pad);
    doc_views<T> dv = read_docs<T>(docs, "predict");
    lengths_t ls = read_lengths(lengths, "predict");
    biaffine::score_list<T> Y;
    {
        py::gil_scoped_release release;
        Y = with_model(s, o, [&](auto& m) { return m->predict(dv.maps, ls); });
    }
    return adopt_scores(Y);
}

template <class T>
void predict_stream(py::object self, const py::handle& docs, const py::handle& lengths, const py::function& callback,
                    const py::object& budget, long long threads, long long buffer, const std::string& oversize,
                    bool pad)
{
    auto& s = self.cast<scorer_t<T>&>();
    run_options o = read_options(budget, threads, buffer, oversize, pad);
    doc_views<T> dv = read_docs<T>(docs, "predict_stream");
    lengths_t ls = read_lengths(lengths, "predict_stream");
    const std::size_t labels = s.labels();
    auto sink = [&](std::size_t split, std::size_t doc, biaffine::score_view<const T> v) {
        py::gil_scoped_acquire acquire;
        std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(v.n), static_cast<py::ssize_t>(v.n)};
        std::vector<py::ssize_t> strides{static_cast<py::ssize_t>(v.row_stride * sizeof(T)),
                                         static_cast<py::ssize_t>(labels * sizeof(T))};
        if (labels > 1) {
            shape.push_back(static_cast<py::ssize_t>(labels));
            strides.push_back(sizeof(T));
        }
        // A read-only view of the C++ buffer, valid during the call only:
        // keeping it (or a view of it) past the call is refused below.
        py::array view = v.n ? py::array(py::dtype::of<T>(), shape, strides, v.data, py::none())
                             : py::array(py::array_t<T>(shape));
        view.attr("setflags")(py::arg("write") = false);
        callback(split, doc, view);
        if (v.n != 0 && view.ref_count() > 1) {
            throw py::value_error("predict_stream: the callback kept a reference to the score view of split " +
                                  std::to_string(split) +
                                  ", which is valid only during the call; keep a copy (scores.copy()) instead");
        }
    };
    py::gil_scoped_release release;
    with_model(s, o, [&](auto& m) {
        m->predict_stream(dv.maps, ls, sink);
        return 0;
    });
}

template <class T>
py::tuple forward(py::object self, const py::handle& docs, const py::handle& lengths, bool train,
                  const py::object& budget, long long threads, long long buffer, const std::string& oversize, bool pad)
{
    auto& s = self.cast<scorer_t<T>&>();
    run_options o = read_options(budget, threads, buffer, oversize, pad);
    doc_views<T> dv = read_docs<T>(docs, "forward");
    lengths_t ls = read_lengths(lengths, "forward");
    biaffine::score_list<T> Y;
    typename py_backprop<T>::fn fn;
    {
        py::gil_scoped_release release;
        with_model(s, o, [&](auto& m) {
            auto [y, bp] = m->forward(dv.maps, ls, train ? biaffine::mode::train : biaffine::mode::eval);
            Y = std::move(y);
            // The callback keeps the layer composition (and, through py_backprop,
            // the documents and the scorer) alive until it has run.
            auto shared_bp = std::make_shared<std::decay_t<decltype(bp)>>(std::move(bp));
            fn = [m, shared_bp](const std::vector<biaffine::score_view<const T>>& dY) {
                return (*shared_bp)(biaffine::span<const biaffine::score_view<const T>>(dY.data(), dY.size()));
            };
            return 0;
        });
    }
    py::list y = adopt_scores(Y);
    auto bp = py::cast(py_backprop<T>(std::move(fn), self, std::move(dv.keep)));
    return py::make_tuple(y, bp);
}

// The bench's C++ side (bench/python_vs_cpp.py): the same predict as
// predict() on the same arrays, `reps` times inside C++ with no Python in
// between; returns the seconds of each run.
template <class T>
std::vector<double> time_predict(py::object self, const py::handle& docs, const py::handle& lengths,
                                 const py::object& budget, long long threads, int reps)
{
    auto& s = self.cast<scorer_t<T>&>();
    run_options o = read_options(budget, threads, 256, "run_alone", false);
    doc_views<T> dv = read_docs<T>(docs, "time_predict");
    lengths_t ls = read_lengths(lengths, "time_predict");
    std::vector<double> out;
    py::gil_scoped_release release;
    for (int r = 0; r < reps; ++r) {
        // Timed like the Python call: until the scores are returned (they
        // are freed after the clock stops, as the bench's Python side does).
        const auto t0 = std::chrono::steady_clock::now();
        biaffine::score_list<T> Y = with_model(s, o, [&](auto& m) { return m->predict(dv.maps, ls); });
        out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return out;
}

template <class T>
py::array predict_padded(py::object self, const py::handle& x, const std::vector<std::int64_t>& lengths)
{
    auto& s = self.cast<scorer_t<T>&>();
    auto a = exact_array<T>(x, "predict_padded: x", -1, "");
    if (a.ndim() != 3) throw_shape("padded input: expected x [b, L, n_in], got " + std::to_string(a.ndim()) + " dimensions");
    std::array<std::size_t, 3> shape{static_cast<std::size_t>(a.shape(0)), static_cast<std::size_t>(a.shape(1)),
                                     static_cast<std::size_t>(a.shape(2))};
    auto xv = xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
    biaffine::score_array<T> y;
    {
        py::gil_scoped_release release;
        y = s.predict_padded(xv, lengths);
    }
    return adopt(std::move(y));
}

template <class T>
py::tuple forward_padded(py::object self, const py::handle& x, const std::vector<std::int64_t>& lengths, bool train)
{
    auto& s = self.cast<scorer_t<T>&>();
    auto a = exact_array<T>(x, "forward_padded: x", -1, "");
    if (a.ndim() != 3) throw_shape("padded input: expected x [b, L, n_in], got " + std::to_string(a.ndim()) + " dimensions");
    std::array<std::size_t, 3> shape{static_cast<std::size_t>(a.shape(0)), static_cast<std::size_t>(a.shape(1)),
                                     static_cast<std::size_t>(a.shape(2))};
    auto xv = xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
    biaffine::score_array<T> y;
    typename py_padded_backprop<T>::fn fn;
    {
        py::gil_scoped_release release;
        auto [yy, bp] = s.forward_padded(xv, lengths, train ? biaffine::mode::train : biaffine::mode::eval);
        y = std::move(yy);
        auto shared_bp = std::make_shared<std::decay_t<decltype(bp)>>(std::move(bp));
        fn = [shared_bp](const biaffine::score_array<T>& dy) { return (*shared_bp)(dy); };
    }
    py::array ya = adopt(std::move(y));
    return py::make_tuple(ya, py::cast(py_padded_backprop<T>(std::move(fn), self, a)));
}

template <class T>
void bind_scorer(py::module_& m, const char* name)
{
    using S = scorer_t<T>;
    py::class_<py_backprop<T>>(m, (std::string(name) + "_backprop").c_str())
        .def("__call__", &py_backprop<T>::call, py::arg("dY"))
        .def("__bool__", &py_backprop<T>::live);
    py::class_<py_padded_backprop<T>>(m, (std::string(name) + "_padded_backprop").c_str())
        .def("__call__", &py_padded_backprop<T>::call, py::arg("dy"));

    const py::object default_budget = py::cast(biaffine::budget::megabytes(16));
    py::class_<S>(m, name)
        .def(py::init([](long long n_in, long long hidden, long long labels, bool bias_u, bool bias_v, double dropout,
                         std::uint64_t seed, bool recompute) {
                 if (n_in < 0 || hidden < 0 || labels < 0) {
                     throw biaffine::shape_error("biaffine_scorer: n_in, hidden and labels must be positive, got n_in=" +
                                                 std::to_string(n_in) + " hidden=" + std::to_string(hidden) +
                                                 " labels=" + std::to_string(labels));
                 }
                 biaffine::scorer_config c;
                 c.n_in = static_cast<std::size_t>(n_in);
                 c.hidden = static_cast<std::size_t>(hidden);
                 c.labels = static_cast<std::size_t>(labels);
                 c.bias_u = bias_u;
                 c.bias_v = bias_v;
                 c.dropout = dropout;
                 c.seed = seed;
                 c.recompute_in_backward = recompute;
                 return std::make_unique<S>(c);
             }),
             py::arg("n_in"), py::arg("hidden") = 128, py::arg("labels") = 1, py::arg("bias_u") = true,
             py::arg("bias_v") = true, py::arg("dropout") = 0.0, py::arg("seed") = 0,
             py::arg("recompute_in_backward") = false)
        .def_property_readonly("dtype", [](const S&) { return py::dtype::of<T>(); })
        .def_property_readonly("n_in", &S::n_in)
        .def_property_readonly("hidden", &S::hidden)
        .def_property_readonly("labels", &S::labels)
        .def_property_readonly("bias_u", [](const S& s) { return s.config().bias_u; })
        .def_property_readonly("bias_v", [](const S& s) { return s.config().bias_v; })
        .def_property_readonly("dropout", [](const S& s) { return s.config().dropout; })
        .def_property_readonly("seed", [](const S& s) { return s.config().seed; })
        .def_property_readonly("recompute_in_backward", [](const S& s) { return s.config().recompute_in_backward; })
        .def("parameters",
             [](py::object self) {
                 auto& s = self.cast<S&>();
                 py::list out;
                 for (auto& p : s.parameters()) {
                     out.append(py::make_tuple(p.name, param_view<T>(self, p.data, p.shape),
                                               param_view<T>(self, p.grad, p.shape)));
                 }
                 return out;
             },
             "[(name, value, grad)]: writable numpy views of the scorer's own buffers")
        .def("zero_grad", &S::zero_grad)
        .def("initialize", &S::initialize, py::arg("seed"))
        .def("set_parameter",
             [](S& s, const std::string& name, const py::array_t<double, py::array::c_style | py::array::forcecast>& v) {
                 std::vector<std::size_t> shape(v.shape(), v.shape() + v.ndim());
                 s.set_parameter(name, xt::adapt(v.data(), static_cast<std::size_t>(v.size()), xt::no_ownership(), shape));
             },
             py::arg("name"), py::arg("value"))
        .def("save_npy", [](S& s, const std::string& dir) { biaffine::save_npy(s, dir); }, py::arg("dir"))
        .def("load_npy", [](S& s, const std::string& dir) { biaffine::load_npy(s, dir); }, py::arg("dir"))
        .def("cost",
             [](const S& s, std::size_t count, std::size_t max_len, bool train) {
                 biaffine::batch_cost c = s.cost(count, max_len, train ? biaffine::mode::train : biaffine::mode::eval);
                 py::dict d;
                 d["scratch"] = c.scratch;
                 d["heap"] = c.heap;
                 d["saved"] = c.saved;
                 d["outputs"] = c.outputs;
                 d["total"] = c.total();
                 return d;
             },
             py::arg("count"), py::arg("max_len"), py::arg("train") = false)
        .def("predict", &predict<T>, py::arg("docs"), py::arg("split_lengths"), py::kw_only(),
             py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("buffer") = 256,
             py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false)
        .def("predict_stream", &predict_stream<T>, py::arg("docs"), py::arg("split_lengths"), py::arg("callback"),
             py::kw_only(), py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("buffer") = 256,
             py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false)
        .def("forward", &forward<T>, py::arg("docs"), py::arg("split_lengths"), py::kw_only(), py::arg("train") = true,
             py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("buffer") = 256,
             py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false)
        .def("_time_predict_cpp", &time_predict<T>, py::arg("docs"), py::arg("split_lengths"), py::kw_only(),
             py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("reps") = 1)
        .def("predict_padded", &predict_padded<T>, py::arg("x"), py::arg("lengths"))
        .def("forward_padded", &forward_padded<T>, py::arg("x"), py::arg("lengths"), py::kw_only(),
             py::arg("train") = true);
}

// --------------------------------------------------------------- decoding

template <class F>
py::array_t<std::int64_t> decode(const py::handle& obj, const char* where, F&& f)
{
    if (!py::isinstance<py::array>(obj)) {
        throw py::type_error(std::string(where) + ": expected a 2-d numpy array of float32 or float64 scores, got " +
                             type_of(obj));
    }
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (a.ndim() != 2) {
        throw_shape(std::string(where) + ": expected a square [n, n] score matrix, got " + std::to_string(a.ndim()) +
                    " dimensions");
    }
    auto run = [&](auto tag) {
        using T = decltype(tag);
        const auto item = static_cast<py::ssize_t>(sizeof(T));
        const std::size_t n = static_cast<std::size_t>(a.shape(0));
        if (a.shape(0) != a.shape(1)) {
            throw_shape(std::string(where) + ": expected a square [n, n] score matrix, got [" +
                        std::to_string(a.shape(0)) + ", " + std::to_string(a.shape(1)) + "]");
        }
        // Rows may be strided (a block of a padded batch), elements not.
        if (n > 1 && (a.strides(1) != item || a.strides(0) <= 0 || a.strides(0) % item != 0)) {
            throw py::value_error(std::string(where) +
                                  ": each row must be contiguous (row stride a positive multiple of the item size); "
                                  "pass np.ascontiguousarray(...)");
        }
        const T* data = static_cast<const T*>(a.data());
        const std::size_t stride = n > 1 ? static_cast<std::size_t>(a.strides(0) / item) : n;
        std::vector<std::size_t> h;
        {
            py::gil_scoped_release release;
            h = f(data, n, stride);
        }
        py::array_t<std::int64_t> out(static_cast<py::ssize_t>(h.size()));
        for (std::size_t i = 0; i < h.size(); ++i) out.mutable_at(i) = static_cast<std::int64_t>(h[i]);
        return out;
    };
    if (a.dtype().is(py::dtype::of<float>())) return run(float{});
    if (a.dtype().is(py::dtype::of<double>())) return run(double{});
    throw py::type_error(std::string(where) + ": expected dtype float32 or float64, got " + dtype_name(a.dtype()));
}

std::vector<std::size_t> read_size_list(const py::handle& obj, const char* what)
{
    if (!py::isinstance<py::sequence>(obj) && !py::isinstance<py::array>(obj)) {
        throw py::type_error(std::string(what) + ": expected a list of non-negative integers, got " + type_of(obj));
    }
    std::vector<std::size_t> out;
    for (py::handle x : obj) {
        if (py::isinstance<py::float_>(x) || !py::hasattr(x, "__index__")) {
            throw py::type_error(std::string(what) + ": expected integers, got " + type_of(x));
        }
        const long long v = x.attr("__index__")().cast<long long>();
        if (v < 0) throw biaffine::length_error(std::string(what) + ": negative length " + std::to_string(v));
        out.push_back(static_cast<std::size_t>(v));
    }
    return out;
}

template <class F>
std::vector<std::size_t> with_scores_1d(const py::handle& obj, const char* where, F&& f)
{
    if (!py::isinstance<py::array>(obj)) {
        throw py::type_error(std::string(where) + ": scores must be a 1-d numpy array of float32 or float64, got " +
                             type_of(obj));
    }
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (a.ndim() != 1) {
        throw_shape(std::string(where) + ": scores: expected a 1-d array, got " + std::to_string(a.ndim()) +
                    " dimensions");
    }
    if (!(a.flags() & py::array::c_style)) {
        throw py::value_error(std::string(where) + ": scores are not contiguous; pass np.ascontiguousarray(...)");
    }
    const std::size_t n = static_cast<std::size_t>(a.shape(0));
    if (a.dtype().is(py::dtype::of<float>())) return f(static_cast<const float*>(a.data()), n);
    if (a.dtype().is(py::dtype::of<double>())) return f(static_cast<const double*>(a.data()), n);
    throw py::type_error(std::string(where) + ": expected dtype float32 or float64, got " + dtype_name(a.dtype()));
}

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

py::dtype dtype_of(const py::handle& obj)
{
    if (!py::isinstance<py::array>(obj)) {
        throw py::type_error("pairwise_bilinear: u must be a numpy array, got " + type_of(obj));
    }
    return py::reinterpret_borrow<py::array>(obj).dtype();
}

py::dict stats_dict(const biaffine::memory_stats& s)
{
    py::dict d;
    d["current_bytes"] = s.current_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["output_bytes"] = s.output_bytes;
    d["work_peak_bytes"] = s.work_peak_bytes;
    d["allocations"] = s.allocations;
    d["frees"] = s.frees;
    return d;
}

}  // namespace

// python/CMakeLists.txt builds this once per ISA variant, as _biaffine_<variant>.
#ifndef BIAFFINE_PY_MODULE
#define BIAFFINE_PY_MODULE _biaffine
#endif

PYBIND11_MODULE(BIAFFINE_PY_MODULE, m)
{
    m.doc() = "biaffine: split-batched biaffine scoring with bounded peak memory (C++ core)";
    m.attr("__version__") = biaffine::version_string;
    // The ABI name this module was compiled under (include/biaffine/abi.hpp):
    // version, float backend, ISA level.
    m.attr("abi_tag") = biaffine::abi_tag;
    biaffine_py::bind_build_info(m);

    // The exception hierarchy of include/biaffine/errors.hpp. biaffine::error
    // is a std::invalid_argument, so Error is a ValueError; OverflowError is
    // also the builtin OverflowError.
    py::object builtins = py::module_::import("builtins");
    auto make = [&](const char* name, py::object bases, const char* doc) {
        py::dict ns;
        ns["__doc__"] = doc;
        ns["__module__"] = "biaffine";
        py::object cls = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(name, bases, ns);
        m.attr(name) = cls;
        return cls.release().ptr();
    };
    g_exc.error = make("Error", py::make_tuple(builtins.attr("ValueError")),
                       "Base of every biaffine error (C++ biaffine::error, a std::invalid_argument).");
    g_exc.shape = make("ShapeError", py::make_tuple(py::handle(g_exc.error)), "A shape or width does not match (biaffine::shape_error).");
    g_exc.length = make("LengthError", py::make_tuple(py::handle(g_exc.error)),
                        "A negative or out-of-range length (biaffine::length_error).");
    g_exc.budget = make("BudgetError", py::make_tuple(py::handle(g_exc.error)),
                        "A zero or too-small budget, an oversize split under oversize='throw' (biaffine::budget_error).");
    g_exc.overflow = make("OverflowError", py::make_tuple(py::handle(g_exc.budget), builtins.attr("OverflowError")),
                          "A size computation overflows 64 bits (biaffine::overflow_error).");
    g_exc.backprop = make("BackpropError", py::make_tuple(py::handle(g_exc.error)),
                          "A backprop callback called twice or empty (biaffine::backprop_error).");
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const biaffine::overflow_error& e) {
            PyErr_SetString(g_exc.overflow, e.what());
        } catch (const biaffine::budget_error& e) {
            PyErr_SetString(g_exc.budget, e.what());
        } catch (const biaffine::shape_error& e) {
            PyErr_SetString(g_exc.shape, e.what());
        } catch (const biaffine::length_error& e) {
            PyErr_SetString(g_exc.length, e.what());
        } catch (const biaffine::backprop_error& e) {
            PyErr_SetString(g_exc.backprop, e.what());
        } catch (const biaffine::error& e) {
            PyErr_SetString(g_exc.error, e.what());
        }
        // Anything else (std::bad_alloc -> MemoryError, pybind11's own, a
        // Python exception from a callback) goes to the default translators.
    });

    py::class_<biaffine::budget>(m, "budget", "A batch budget: budget.items(n), budget.bytes(b), budget.megabytes(mb).")
        .def_static("items", &biaffine::budget::items, py::arg("n"))
        .def_static("bytes", &biaffine::budget::bytes, py::arg("b"))
        .def_static("megabytes", &biaffine::budget::megabytes, py::arg("mb"))
        .def_property_readonly("kind", [](const biaffine::budget& b) {
            return b.kind == biaffine::budget_kind::bytes ? "bytes" : "items";
        })
        .def_property_readonly("value", [](const biaffine::budget& b) { return b.value; })
        .def("__repr__", [](const biaffine::budget& b) {
            return std::string("budget.") + (b.kind == biaffine::budget_kind::bytes ? "bytes(" : "items(") +
                   std::to_string(b.value) + ")";
        });

    bind_scorer<float>(m, "biaffine_scorer_float32");
    bind_scorer<double>(m, "biaffine_scorer_float64");

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
    m.def("is_tree", [](const py::handle& h) { return biaffine::is_tree(read_size_list(h, "is_tree")); }, py::arg("heads"));
    m.def("lazy_split",
          [](const py::handle& scores, std::size_t max_length) {
              return with_scores_1d(scores, "lazy_split", [&](auto* d, std::size_t n) {
                  py::gil_scoped_release release;
                  return biaffine::lazy_split(d, n, max_length);
              });
          },
          py::arg("sent_start_scores"), py::arg("max_length"));
    m.def("cap_split_lengths",
          [](const py::handle& lengths, std::size_t max_length, const py::object& scores) {
              std::vector<std::size_t> ls = read_size_list(lengths, "cap_split_lengths");
              if (scores.is_none()) return biaffine::cap_split_lengths(ls, max_length, nullptr);
              return with_scores_1d(scores, "cap_split_lengths", [&](auto* d, std::size_t n) {
                  auto view = xt::adapt(d, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
                  return biaffine::cap_split_lengths(ls, max_length, view);
              });
          },
          py::arg("lengths"), py::arg("max_length"), py::arg("scores") = py::none());
    m.def("minibatch_by_padded_size",
          [](const py::handle& lengths, std::uint64_t size, std::size_t buffer) {
              return biaffine::minibatch_by_padded_size(read_size_list(lengths, "minibatch_by_padded_size"), size, buffer);
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

    // Memory accounting: the process-wide tracker and the memory log.
    m.def("memory_stats", []() { return stats_dict(biaffine::tracker().stats()); },
          "The tracker's figures: current, peak, output and work-peak bytes, allocation and free counts.");
    m.def("reset_peak", []() { biaffine::tracker().reset_peak(); });
    m.def("set_limit", [](std::uint64_t b) { biaffine::tracker().set_limit(b); }, py::arg("bytes"),
          "A hard cap on tracked bytes (0: none); an allocation over it raises MemoryError.");
    m.def("limit", []() { return biaffine::tracker().limit(); });
    m.def("format_bytes", [](double b) { return biaffine::format_bytes(b); }, py::arg("bytes"));

    py::class_<biaffine::memory_checkpoint>(m, "memory_checkpoint")
        .def_readonly("label", &biaffine::memory_checkpoint::label)
        .def_readonly("current_bytes", &biaffine::memory_checkpoint::current_bytes)
        .def_readonly("peak_bytes", &biaffine::memory_checkpoint::peak_bytes)
        .def_readonly("change_bytes", &biaffine::memory_checkpoint::change_bytes)
        .def_readonly("seconds", &biaffine::memory_checkpoint::seconds)
        .def("__repr__", [](const biaffine::memory_checkpoint& c) {
            return "memory_checkpoint(" + c.label + ", current=" + std::to_string(c.current_bytes) +
                   ", peak=" + std::to_string(c.peak_bytes) + ", change=" + std::to_string(c.change_bytes) + ")";
        });
    py::class_<biaffine::memory_log>(m, "memory_log")
        .def(py::init<>())
        .def("checkpoint", &biaffine::memory_log::checkpoint, py::arg("label"), py::return_value_policy::copy)
        .def("checkpoints", &biaffine::memory_log::checkpoints, py::return_value_policy::copy)
        .def("peak_bytes", &biaffine::memory_log::peak_bytes)
        .def("summary", &biaffine::memory_log::summary)
        .def("write_csv", [](const biaffine::memory_log& l, const std::string& path) { l.write_csv(path); },
             py::arg("path"));
}
