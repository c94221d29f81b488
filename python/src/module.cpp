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

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
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
    PyObject* head = nullptr;
};
exception_types g_exc;

[[noreturn]] void throw_shape(const std::string& what)
{
    // Raised from the binding for rows of the bad-input table it checks
    // itself (e.g. as-view-rank): the same class the C++ layer would give.
    throw biaffine::shape_error(what);
}

std::string dtype_name(const py::dtype& d) { return std::string(py::str(py::handle(d))); }

// An ml_dtypes.bfloat16 dtype (2 bytes, the bits of biaffine::bfloat16).
bool is_ml_dtypes_bfloat16(const py::dtype& d)
{
    return d.itemsize() == 2 && dtype_name(d) == "bfloat16";
}

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
    // bfloat16 goes out as its bits, uint16 (ml_dtypes.bfloat16's bytes).
    using T = std::conditional_t<std::is_same<typename V::value_type, biaffine::bfloat16>::value, std::uint16_t,
                                 typename V::value_type>;
    std::vector<py::ssize_t> shape(c.shape().begin(), c.shape().end());
    if (c.size() == 0) return py::array_t<T>(shape);  // nothing to own
    auto* owned = new V(std::move(c));
    py::capsule owner(owned, [](void* p) { delete static_cast<V*>(p); });
    return py::array_t<T>(shape, reinterpret_cast<T*>(owned->data()), owner);
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

// True and False (and numpy's bools) are ints to Python; as lengths or
// counts they would read as 1 and 0 without a word, so they are refused.
bool is_bool(const py::handle& x)
{
    // numpy.bool_, looked up once (numpy is loaded with this module); the
    // reference is kept for the process, so no destructor runs at exit.
    static const py::handle np_bool = py::object(py::module_::import("numpy").attr("bool_")).release();
    return py::isinstance<py::bool_>(x) || py::isinstance(x, np_bool);
}

// One length (a split length, a sentence length, a head index): an integer,
// not a bool, not a float, that fits a signed 64-bit size. Negative values
// pass through (the C++ layer names them: "negative length").
long long read_length(const py::handle& x, const std::string& what)
{
    const bool plain_int = PyLong_CheckExact(x.ptr());  // the common case, never a bool
    if (!plain_int && (is_bool(x) || py::isinstance<py::float_>(x) || !py::hasattr(x, "__index__"))) {
        throw py::type_error(what + " must hold integers, got " + type_of(x));
    }
    const py::object v = plain_int ? py::reinterpret_borrow<py::object>(x) : x.attr("__index__")();
    int overflow = 0;
    const long long out = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0) {
        throw biaffine::length_error(what + ": " + std::string(py::str(v)) +
                                     " is out of range (a length is at most 2**63 - 1)");
    }
    if (out == -1 && PyErr_Occurred()) throw py::error_already_set();
    return out;
}

// A 1-d array of lengths must be of integers (a bool array reads as 0/1).
void check_length_array(const py::handle& l, const std::string& what)
{
    if (!py::isinstance<py::array>(l)) return;
    const auto dt = py::reinterpret_borrow<py::array>(l).dtype();
    if (dt.kind() != 'i' && dt.kind() != 'u') {
        throw py::type_error(what + " must hold integers, got dtype " + dtype_name(dt));
    }
}

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
        const std::string name = std::string(what) + ": split_lengths[" + std::to_string(d) + "]";
        if (!py::isinstance<py::sequence>(l) && !py::isinstance<py::array>(l)) {
            throw py::type_error(name + " must be a list of integers, got " + type_of(l));
        }
        check_length_array(l, name);
        std::vector<long long> row;
        std::size_t i = 0;
        for (py::handle x : l) row.push_back(read_length(x, name + "[" + std::to_string(i++) + "]"));
        out.push_back(std::move(row));
    }
    return out;
}

// A non-negative Python integer (not a bool, not a float) for `what`.
std::uint64_t read_count(const py::handle& x, const std::string& what)
{
    if (py::isinstance<py::bool_>(x) || py::isinstance<py::float_>(x) || !py::hasattr(x, "__index__")) {
        throw py::type_error(what + ": expected an integer, got " + type_of(x));
    }
    py::int_ v = x.attr("__index__")();
    if (v < py::int_(0)) {
        throw py::value_error(what + ": expected a non-negative integer, got " + std::string(py::str(v)));
    }
    if (v > py::int_(std::numeric_limits<std::uint64_t>::max())) {
        throw biaffine::overflow_error(what + ": " + std::string(py::str(v)) + " does not fit in 64 bits");
    }
    return v.cast<std::uint64_t>();
}

// biaffine.budget.megabytes(mb): an integer goes through the C++ factory
// (its overflow message); a float is rounded down to whole bytes.
biaffine::budget budget_megabytes(const py::handle& mb)
{
    if (py::isinstance<py::float_>(mb)) {
        const double v = mb.cast<double>();
        if (!std::isfinite(v) || v < 0) {
            throw py::value_error("budget.megabytes: expected a finite non-negative number, got " +
                                  std::string(py::repr(mb)));
        }
        const double b = std::floor(v * 1048576.0);
        if (b >= 18446744073709551616.0) {
            throw biaffine::overflow_error("budget in megabytes: " + std::string(py::repr(mb)) +
                                           " MiB does not fit in 64 bits of bytes");
        }
        return biaffine::budget::bytes(static_cast<std::uint64_t>(b));
    }
    if (py::isinstance<py::bool_>(mb) || !py::hasattr(mb, "__index__")) {
        throw py::type_error("budget.megabytes: expected a number of MiB (int or float), got " + type_of(mb));
    }
    return biaffine::budget::megabytes(read_count(mb, "budget.megabytes"));
}

// Per-document heads: a list (one per document) of 1-d integer arrays or
// lists of integers, each index relative to its split.
using heads_t = std::vector<std::vector<std::int64_t>>;

std::vector<std::int64_t> read_int_row(const py::handle& l, const std::string& what)
{
    std::vector<std::int64_t> row;
    if (py::isinstance<py::array>(l)) {
        auto a = py::reinterpret_borrow<py::array>(l);
        const char kind = a.dtype().kind();
        if (kind != 'i' && kind != 'u') {
            throw py::type_error(what + " must hold integers, got dtype " + dtype_name(a.dtype()));
        }
        if (a.ndim() != 1) {
            throw py::value_error(what + ": expected a 1-d array, got " + std::to_string(a.ndim()) + " dimensions");
        }
        auto c = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
        if (!c) throw py::error_already_set();
        row.assign(c.data(), c.data() + c.size());
        return row;
    }
    if (!py::isinstance<py::sequence>(l) || py::isinstance<py::str>(l)) {
        throw py::type_error(what + " must be a list or 1-d array of integers, got " + type_of(l));
    }
    auto seq = py::reinterpret_borrow<py::sequence>(l);
    row.reserve(seq.size());
    for (py::handle x : seq) {
        if (py::isinstance<py::float_>(x) || py::isinstance<py::bool_>(x) || !py::hasattr(x, "__index__")) {
            throw py::type_error(what + " must hold integers, got " + type_of(x));
        }
        row.push_back(x.attr("__index__")().cast<std::int64_t>());
    }
    return row;
}

heads_t read_int_lists(const py::handle& obj, const std::string& what)
{
    if (py::isinstance<py::array>(obj) || !py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj)) {
        throw py::type_error(what + " must be a list with one 1-d integer array (or list) per entry, got " +
                             type_of(obj));
    }
    auto seq = py::reinterpret_borrow<py::sequence>(obj);
    heads_t out;
    out.reserve(seq.size());
    for (std::size_t d = 0; d < seq.size(); ++d) {
        out.push_back(read_int_row(seq[d], what + "[" + std::to_string(d) + "]"));
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
            // Deprecated: a bare int reads as bytes here but as padded items
            // in with_minibatch_by_padded_size(size=...); say which is meant.
            if (PyErr_WarnEx(PyExc_FutureWarning,
                             "budget=<int> is read as bytes and is deprecated: pass biaffine.budget.bytes(n), "
                             "budget.megabytes(mb) or budget.items(n)",
                             1) != 0) {
                throw py::error_already_set();
            }
            o.budget = biaffine::budget::bytes(read_count(budget, "budget"));
        } else {
            throw py::type_error("budget must be a biaffine.budget (budget.bytes(n), budget.megabytes(mb) or "
                                 "budget.items(n)) or None, got " + type_of(budget));
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

// One split's gradient as the C++ backprop takes it: `[n, n(, o)]` scores
// (forward) or `[n, o]` labels at given heads (forward_heads).
template <class T>
biaffine::score_view<const T> grad_view(const py::array_t<T>& a, std::size_t k, biaffine::score_view<const T>*)
{
    std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
    auto x = xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
    try {
        return biaffine::as_score_view(x);
    } catch (const biaffine::shape_error& e) {
        throw biaffine::shape_error("split gradient " + std::to_string(k) + ": " + e.what());
    }
}

template <class T>
biaffine::seq_view<const T> grad_view(const py::array_t<T>& a, std::size_t k, biaffine::seq_view<const T>*)
{
    if (a.ndim() != 2) {  // the message of with_splits::head_grad_views
        throw biaffine::shape_error("split gradient " + std::to_string(k) + ": expected [n, o], got " +
                                    std::to_string(a.ndim()) + " dimensions");
    }
    const auto rows = static_cast<std::size_t>(a.shape(0)), cols = static_cast<std::size_t>(a.shape(1));
    return {a.data(), rows, cols, static_cast<std::ptrdiff_t>(cols), 1};
}

// What forward() / forward_heads() return as the second element: callable
// once with the per-split gradients (View: score_view or seq_view), returns
// the per-document dX.
template <class T, class View>
class py_backprop {
public:
    using doc_grads = biaffine::tracked_vector<biaffine::tensor<T, 2>>;
    using fn = std::function<doc_grads(const std::vector<View>&)>;

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
        std::vector<View> views;
        keep.reserve(seq.size());
        views.reserve(seq.size());
        for (std::size_t k = 0; k < seq.size(); ++k) {
            auto a = exact_array<T>(seq[k], "backprop: dY[" + std::to_string(k) + "]", -1, "");
            views.push_back(grad_view<T>(a, k, static_cast<View*>(nullptr)));
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
    py_padded_backprop(fn f, py::object scorer, py::object x, const char* where)
        : f_(std::move(f)), scorer_(std::move(scorer)), x_(std::move(x)), where_(where)
    {
    }

    py::array call(const py::handle& dy)
    {
        if (!f_) {
            throw biaffine::backprop_error(called_ ? "backprop called a second time: each forward's callback runs once"
                                                   : "backprop called on an empty callback");
        }
        auto a = exact_array<T>(dy, std::string(where_) + " backprop: dy", -1, "");
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
    const char* where_;
    bool called_ = false;
};

// ----------------------------------------------------------------- scorer

template <class T>
using scorer_t = biaffine::biaffine_scorer<T>;

// The scorer of a call that computes (inference, or a training forward:
// `trains`). Python holds numpy views of the parameters (parameters(),
// Thinc's params) and writes through them without the scorer seeing it. A
// bf16 scorer's inference compares the weights with the ones its bf16 copy
// was made from (watch_parameter_writes: a memcmp per call) and packs again
// only when they differ - never in place under another call's feet, so
// predict* may run on several threads (issue 47: bumping the version on
// every call repacked the copy while other calls read it). A training
// forward (not concurrent with other calls on the scorer) marks the
// parameters changed, so its bf16 weights are made again from the views.
template <class T>
scorer_t<T>& called_scorer(py::object& self, bool trains = false)
{
    auto& s = self.cast<scorer_t<T>&>();
    if (s.config().precision == biaffine::compute_precision::bf16) {
        if (trains) {
            s.parameters_changed();
        } else {
            s.watch_parameter_writes();
        }
    }
    return s;
}

template <class T>
py::array param_view(const py::object& self, T* data, const std::vector<std::size_t>& shape)
{
    std::vector<py::ssize_t> s(shape.begin(), shape.end());
    return py::array_t<T>(s, data, self);  // a writable view; `self` stays alive with it
}

// What every pipeline call reads first, in this order: the options, the
// documents as views, the split lengths and (heads calls) each document's heads.
template <class T>
struct call_args {
    run_options o;
    doc_views<T> dv;
    lengths_t ls;
    heads_t hs;
    call_args(const std::string& where, const py::handle& docs, const py::handle& lengths, const py::handle* heads,
              const py::object& budget, long long threads, long long buffer, const std::string& oversize, bool pad)
        : o(read_options(budget, threads, buffer, oversize, pad)),
          dv(read_docs<T>(docs, where.c_str())),
          ls(read_lengths(lengths, where.c_str()))
    {
        if (heads) hs = read_int_lists(*heads, where + ": heads");
    }
};

// The outputs an inference call's output= asks for: the scorer's own dtype,
// or (float32 scorers) bfloat16, as ml_dtypes.bfloat16 arrays or as uint16
// arrays of the bits.
enum class output_dtype { own, bfloat16, bfloat16_bits };

template <class T>
output_dtype read_output(const std::string& output, const char* where)
{
    const std::string own = std::is_same<T, float>::value ? "float32" : "float64";
    if (output == own) return output_dtype::own;
    if (output == "bfloat16" || output == "bfloat16_bits") {
        if (!std::is_same<T, float>::value) {
            throw py::value_error(std::string(where) + ": output='" + output +
                                  "' needs a float32 scorer (this one is float64)");
        }
        return output == "bfloat16" ? output_dtype::bfloat16 : output_dtype::bfloat16_bits;
    }
    throw py::value_error(std::string(where) + ": output must be '" + own + "'" +
                          (std::is_same<T, float>::value ? ", 'bfloat16' or 'bfloat16_bits'" : "") + ", got '" +
                          output + "'");
}

// ml_dtypes.bfloat16, imported when asked for (ImportError that says how to get it).
py::object ml_dtypes_bfloat16(const char* where)
{
    try {
        return py::module_::import("ml_dtypes").attr("bfloat16");
    } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_ImportError)) throw;
        py::raise_from(e, PyExc_ImportError,
                       (std::string(where) + ": output='bfloat16' returns ml_dtypes.bfloat16 arrays and needs the "
                                             "ml_dtypes package (pip install ml_dtypes); output='bfloat16_bits' "
                                             "returns the same bytes as uint16 without it")
                           .c_str());
        throw py::error_already_set();
    }
}

// predict / predict_heads with output='bfloat16': each split is streamed in
// float32 (one split of float scratch, as the C++ scorer with bfloat16
// outputs) and stored rounded to nearest even as it arrives, so the kept
// outputs take half the bytes; they go out as uint16 arrays of the bits.
template <bool Heads>
py::list predict_bfloat16(scorer_t<float>& s, call_args<float>& a, output_dtype out, const char* where)
{
    using biaffine::bfloat16;
    // Before the work: a missing ml_dtypes fails the call, not its end.
    const py::object dtype = out == output_dtype::bfloat16 ? ml_dtypes_bfloat16(where) : py::none();
    std::size_t count = 0;
    for (const auto& l : a.ls) count += l.size();
    biaffine::score_list<bfloat16> Y(count);
    {
        py::gil_scoped_release release;
        with_model(s, a.o, [&](auto& m) {
            const std::size_t o = s.labels();
            if constexpr (Heads) {
                using kind = biaffine::detail::labels_at_heads_kind;
                m->predict_heads_stream(a.dv.maps, a.ls, a.hs,
                                        [&](std::size_t k, std::size_t, biaffine::seq_view<const float> v) {
                                            Y[k] = biaffine::score_tensor<bfloat16>({v.rows, o});
                                            kind::convert(kind::dense(Y[k].data(), v.rows, o), v);
                                        });
            } else {
                using kind = biaffine::detail::full_scores_kind;
                m->predict_stream(a.dv.maps, a.ls, [&](std::size_t k, std::size_t, biaffine::score_view<const float> v) {
                    Y[k] = biaffine::score_tensor<bfloat16>(s.score_shape(v.n));
                    kind::convert(kind::dense(Y[k].data(), v.n, o), v);
                });
            }
            return 0;
        });
    }
    py::list bits = adopt_scores(Y);
    if (dtype.is_none()) return bits;
    py::list out_list;
    for (py::handle b : bits) out_list.append(b.attr("view")(dtype));
    return out_list;
}

template <class T>
py::list predict(py::object self, const py::handle& docs, const py::handle& lengths, const py::object& budget,
                 long long threads, long long buffer, const std::string& oversize, bool pad, const std::string& output)
{
    auto& s = called_scorer<T>(self);
    const output_dtype out = read_output<T>(output, "predict");
    call_args<T> a("predict", docs, lengths, nullptr, budget, threads, buffer, oversize, pad);
    if constexpr (std::is_same<T, float>::value) {
        if (out != output_dtype::own) return predict_bfloat16<false>(s, a, out, "predict");
    }
    biaffine::score_list<T> Y;
    {
        py::gil_scoped_release release;
        Y = with_model(s, a.o, [&](auto& m) { return m->predict(a.dv.maps, a.ls); });
    }
    return adopt_scores(Y);
}

// The Python-owned blocks a stream's callback is handed. Library memory is
// never handed out (a stream's own scratch is overwritten by the next split
// and freed with the batch, and numpy cannot move a kept array, nor its
// slices or memoryviews, to a copy afterwards), so the stream writes each
// split straight into a numpy block given as its destination
// (predict_stream_into): no copy. While the callback keeps nothing the block
// goes back to `free` and a later split that fits reuses it; a block still
// referenced after the callback (the array, a slice, a memoryview: each
// holds it through numpy's base chain) stays the caller's, and a later split
// gets a fresh one. With threads > 1 each batch in flight writes into its
// own (`pending`, by split). numpy allocates them, outside the tracker and
// the budget. Touched with the GIL held only.
template <class T>
class stream_blocks {
public:
    // Split `split`'s destination: `count` elements (null for none).
    T* take(std::size_t split, std::size_t count)
    {
        if (count == 0) return nullptr;
        auto fit = std::find_if(free_.begin(), free_.end(), [&](const block& b) { return b.capacity >= count; });
        if (fit == free_.end()) {
            if (!free_.empty()) free_.pop_back();  // an unkept smaller one goes now
            py::array_t<T> a(static_cast<py::ssize_t>(count));
            T* data = a.mutable_data();
            free_.push_back(block{std::move(a), data, count});
            fit = free_.end() - 1;
        }
        pending_.emplace_back(split, std::move(*fit));
        free_.erase(fit);
        return pending_.back().second.data;
    }

    // Calls `callback(split, doc, scores)` with a read-only array over the
    // block the library wrote split `split` into, `data` [shape] (byte
    // strides); the block is reused after only if nothing else holds it.
    void call(const py::function& callback, std::size_t split, std::size_t doc, const T* data,
              const std::vector<py::ssize_t>& shape, const std::vector<py::ssize_t>& strides)
    {
        std::size_t count = 1;
        for (auto e : shape) count *= static_cast<std::size_t>(e);
        block b;
        if (count != 0) {
            auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) { return p.first == split; });
            // A view outside the block would hand library memory to Python.
            if (it == pending_.end() || it->second.data != data) {
                throw std::logic_error("biaffine stream: split " + std::to_string(split) +
                                       " was not written into the block given for it");
            }
            b = std::move(it->second);
            pending_.erase(it);
        }
        py::object view = count == 0 ? py::array(py::array_t<T>(shape))
                                     : py::array(py::dtype::of<T>(), shape, strides, data, b.array);
        view.attr("setflags")(py::arg("write") = false);
        // Whatever the callback does (returns, raises with the array in its
        // traceback's frames), a block still referenced is not reused.
        const auto release = [&] {
            view = py::object();
            if (count != 0 && b.array.ref_count() == 1) free_.push_back(std::move(b));
        };
        try {
            callback(split, doc, view);
        } catch (...) {
            release();
            throw;
        }
        release();
    }

private:
    struct block {
        py::object array;  // 1-d, owns its data
        T* data = nullptr;
        std::size_t capacity = 0;
    };
    std::vector<block> free_;
    std::vector<std::pair<std::size_t, block>> pending_;
};

// A stream's callback: called as callback(split_index, doc_index, scores).
// Checked before any work where inspect can read its signature (passing
// `results.append` is an easy slip); builtins that give no signature are
// called as they are.
py::function read_callback(const py::handle& cb, const char* where)
{
    if (!PyCallable_Check(cb.ptr())) {
        throw py::type_error(std::string(where) + ": callback must be callable as callback(split_index, doc_index, "
                             "scores), got " + type_of(cb));
    }
    py::object sig;
    try {
        sig = py::module_::import("inspect").attr("signature")(cb);
    } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_TypeError)) throw;
        return py::reinterpret_borrow<py::function>(cb);
    }
    try {
        sig.attr("bind")(0, 0, py::none());
    } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_TypeError)) throw;
        throw py::type_error(std::string(where) + ": callback must take three positional arguments (split_index, "
                             "doc_index, scores), but " + std::string(py::repr(cb)) + " has the signature " +
                             std::string(py::str(sig)) + " (" + std::string(py::str(e.value())) + ")");
    }
    return py::reinterpret_borrow<py::function>(cb);
}

template <class T>
void predict_stream(py::object self, const py::handle& docs, const py::handle& lengths, const py::object& callback_obj,
                    const py::object& budget, long long threads, long long buffer, const std::string& oversize,
                    bool pad)
{
    auto& s = called_scorer<T>(self);
    const py::function callback = read_callback(callback_obj, "predict_stream");
    call_args<T> a("predict_stream", docs, lengths, nullptr, budget, threads, buffer, oversize, pad);
    const std::size_t labels = s.labels();
    stream_blocks<T> blocks;  // released with the GIL held: declared before `release`
    auto dest = [&](std::size_t split, std::size_t, std::size_t n) {
        py::gil_scoped_acquire acquire;
        return blocks.take(split, n * n * labels);
    };
    auto sink = [&](std::size_t split, std::size_t doc, biaffine::score_view<const T> v) {
        std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(v.n), static_cast<py::ssize_t>(v.n)};
        std::vector<py::ssize_t> strides{static_cast<py::ssize_t>(v.row_stride * sizeof(T)),
                                         static_cast<py::ssize_t>(labels * sizeof(T))};
        if (labels > 1) {
            shape.push_back(static_cast<py::ssize_t>(labels));
            strides.push_back(sizeof(T));
        }
        py::gil_scoped_acquire acquire;
        blocks.call(callback, split, doc, v.data, shape, strides);
    };
    py::gil_scoped_release release;
    with_model(s, a.o, [&](auto& m) {
        m->predict_stream_into(a.dv.maps, a.ls, dest, sink);
        return 0;
    });
}

template <class T>
py::list predict_heads(py::object self, const py::handle& docs, const py::handle& lengths, const py::handle& heads,
                       const py::object& budget, long long threads, long long buffer, const std::string& oversize,
                       bool pad, const std::string& output)
{
    auto& s = called_scorer<T>(self);
    const output_dtype out = read_output<T>(output, "predict_heads");
    call_args<T> a("predict_heads", docs, lengths, &heads, budget, threads, buffer, oversize, pad);
    if constexpr (std::is_same<T, float>::value) {
        if (out != output_dtype::own) return predict_bfloat16<true>(s, a, out, "predict_heads");
    }
    biaffine::score_list<T> Y;
    {
        py::gil_scoped_release release;
        Y = with_model(s, a.o, [&](auto& m) { return m->predict_heads(a.dv.maps, a.ls, a.hs); });
    }
    return adopt_scores(Y);
}

template <class T>
void predict_heads_stream(py::object self, const py::handle& docs, const py::handle& lengths,
                          const py::handle& heads, const py::object& callback_obj, const py::object& budget,
                          long long threads, long long buffer, const std::string& oversize, bool pad)
{
    auto& s = called_scorer<T>(self);
    const py::function callback = read_callback(callback_obj, "predict_heads_stream");
    call_args<T> a("predict_heads_stream", docs, lengths, &heads, budget, threads, buffer, oversize, pad);
    const std::size_t labels = s.labels();
    stream_blocks<T> blocks;  // released with the GIL held: declared before `release`
    auto dest = [&](std::size_t split, std::size_t, std::size_t n) {
        py::gil_scoped_acquire acquire;
        return blocks.take(split, n * labels);
    };
    auto sink = [&](std::size_t split, std::size_t doc, biaffine::seq_view<const T> v) {
        py::gil_scoped_acquire acquire;
        blocks.call(callback, split, doc, v.data, {static_cast<py::ssize_t>(v.rows), static_cast<py::ssize_t>(v.cols)},
                    {static_cast<py::ssize_t>(v.row_stride * sizeof(T)),
                     static_cast<py::ssize_t>(v.col_stride * sizeof(T))});
    };
    py::gil_scoped_release release;
    with_model(s, a.o, [&](auto& m) {
        m->predict_heads_stream_into(a.dv.maps, a.ls, a.hs, dest, sink);
        return 0;
    });
}

// forward (Heads = false) and forward_heads (true): (Y, backprop).
template <class T, bool Heads>
py::tuple forward_any(py::object self, const py::handle& docs, const py::handle& lengths, const py::handle& heads,
                      bool train, const py::object& budget, long long threads, long long buffer,
                      const std::string& oversize, bool pad)
{
    using View = std::conditional_t<Heads, biaffine::seq_view<const T>, biaffine::score_view<const T>>;
    using bp_t = py_backprop<T, View>;
    const char* where = Heads ? "forward_heads" : "forward";
    auto& s = called_scorer<T>(self, true);
    call_args<T> a(where, docs, lengths, Heads ? &heads : nullptr, budget, threads, buffer, oversize, pad);
    const biaffine::mode md = train ? biaffine::mode::train : biaffine::mode::eval;
    biaffine::score_list<T> Y;
    typename bp_t::fn fn;
    {
        py::gil_scoped_release release;
        with_model(s, a.o, [&](auto& m) {
            auto [y, bp] = [&] {
                if constexpr (Heads) {
                    return m->forward_heads(a.dv.maps, a.ls, a.hs, md);
                } else {
                    return m->forward(a.dv.maps, a.ls, md);
                }
            }();
            Y = std::move(y);
            // The callback keeps the layer composition (and, through py_backprop,
            // the documents and the scorer) alive until it has run.
            auto shared_bp = std::make_shared<std::decay_t<decltype(bp)>>(std::move(bp));
            fn = [m, shared_bp](const std::vector<View>& dY) {
                return (*shared_bp)(biaffine::span<const View>(dY.data(), dY.size()));
            };
            return 0;
        });
    }
    py::list y = adopt_scores(Y);
    auto bp = py::cast(bp_t(std::move(fn), self, std::move(a.dv.keep)));
    return py::make_tuple(y, bp);
}

template <class T>
py::tuple forward(py::object self, const py::handle& docs, const py::handle& lengths, bool train,
                  const py::object& budget, long long threads, long long buffer, const std::string& oversize, bool pad)
{
    return forward_any<T, false>(std::move(self), docs, lengths, py::none(), train, budget, threads, buffer, oversize,
                                 pad);
}

template <class T>
py::tuple forward_heads(py::object self, const py::handle& docs, const py::handle& lengths, const py::handle& heads,
                        bool train, const py::object& budget, long long threads, long long buffer,
                        const std::string& oversize, bool pad)
{
    return forward_any<T, true>(std::move(self), docs, lengths, heads, train, budget, threads, buffer, oversize, pad);
}

// The bench's C++ side (bench/python_vs_cpp.py): the same call as the
// Python method of that name on the same arrays, `reps` times inside C++ with
// no Python in between; returns the seconds of each run. `kind`: "predict",
// "forward_backward" (forward(train) then backprop(dY), dY the given arrays)
// or "predict_heads".
template <class T>
std::vector<double> time_cpp(py::object self, const std::string& kind, const py::handle& docs,
                             const py::handle& lengths, const py::object& heads, const py::object& dY,
                             const py::object& budget, long long threads, int reps)
{
    auto& s = called_scorer<T>(self, kind.rfind("predict", 0) != 0);
    call_args<T> a("time_cpp", docs, lengths, heads.is_none() ? nullptr : &heads, budget, threads, 256, "run_alone",
                   false);
    std::vector<py::array_t<T>> keep;
    std::vector<biaffine::score_view<const T>> dys;
    if (!dY.is_none()) {
        std::size_t k = 0;
        for (py::handle g : dY) {
            keep.push_back(exact_array<T>(g, "time_cpp: dY", -1, ""));
            dys.push_back(grad_view<T>(keep.back(), k++, static_cast<biaffine::score_view<const T>*>(nullptr)));
        }
    }
    if (kind != "predict" && kind != "forward_backward" && kind != "predict_heads") {
        throw py::value_error("time_cpp: unknown kind '" + kind + "'");
    }
    std::vector<double> out;
    py::gil_scoped_release release;
    for (int r = 0; r < reps; ++r) {
        // Timed like the Python call: until the outputs are returned (they
        // are freed after the clock stops, as the bench's Python side does).
        const auto t0 = std::chrono::steady_clock::now();
        if (kind == "predict") {
            biaffine::score_list<T> Y = with_model(s, a.o, [&](auto& m) { return m->predict(a.dv.maps, a.ls); });
            out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        } else if (kind == "predict_heads") {
            biaffine::score_list<T> Y =
                with_model(s, a.o, [&](auto& m) { return m->predict_heads(a.dv.maps, a.ls, a.hs); });
            out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        } else {
            auto dX = with_model(s, a.o, [&](auto& m) {
                auto [Y, bp] = m->forward(a.dv.maps, a.ls, biaffine::mode::train);
                return bp(biaffine::span<const biaffine::score_view<const T>>(dys.data(), dys.size()));
            });
            out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    }
    return out;
}

// A C-contiguous padded input `x [b, L, n_in]` of T, viewed in place.
template <class T>
std::pair<py::array_t<T>, std::array<std::size_t, 3>> padded_input(const py::handle& x, const char* where)
{
    auto a = exact_array<T>(x, std::string(where) + ": x", -1, "");
    if (a.ndim() != 3) {
        throw_shape("padded input: expected x [b, L, n_in], got " + std::to_string(a.ndim()) + " dimensions");
    }
    std::array<std::size_t, 3> shape{static_cast<std::size_t>(a.shape(0)), static_cast<std::size_t>(a.shape(1)),
                                     static_cast<std::size_t>(a.shape(2))};
    return {std::move(a), shape};
}

// Padded heads `[b, L]` of any integer dtype, as int64 (one copy).
xt::xtensor<std::int64_t, 2> padded_heads(const py::handle& heads, const std::array<std::size_t, 3>& xs)
{
    if (!py::isinstance<py::array>(heads)) {
        throw py::type_error("padded heads: expected a 2-d integer numpy array [b, L], got " + type_of(heads));
    }
    auto a = py::reinterpret_borrow<py::array>(heads);
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u') {
        throw py::type_error("padded heads: expected an integer array, got dtype " + dtype_name(a.dtype()));
    }
    if (a.ndim() != 2) {
        std::string got = "[";
        for (py::ssize_t i = 0; i < a.ndim(); ++i) got += (i ? ", " : "") + std::to_string(a.shape(i));
        throw biaffine::head_error("padded input: heads must be [" + std::to_string(xs[0]) + ", " +
                                   std::to_string(xs[1]) + "], got " + got + "]");
    }
    auto c = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    xt::xtensor<std::int64_t, 2> h = xt::xtensor<std::int64_t, 2>::from_shape(
        {static_cast<std::size_t>(c.shape(0)), static_cast<std::size_t>(c.shape(1))});
    std::copy(c.data(), c.data() + c.size(), h.data());
    return h;
}

// The padded interface's `lengths [b]`: integers (not bools), as int64.
std::vector<std::int64_t> padded_lengths(const py::handle& obj, const char* where)
{
    const std::string what = std::string(where) + ": lengths";
    if (!py::isinstance<py::sequence>(obj) && !py::isinstance<py::array>(obj)) {
        throw py::type_error(what + " must be a list or 1-d array of integers, got " + type_of(obj));
    }
    check_length_array(obj, what);
    std::vector<std::int64_t> out;
    std::size_t i = 0;
    for (py::handle x : obj) out.push_back(read_length(x, what + "[" + std::to_string(i++) + "]"));
    return out;
}

template <class T>
py::array predict_padded(py::object self, const py::handle& x, const py::handle& lengths_obj)
{
    auto& s = called_scorer<T>(self);
    auto [a, shape] = padded_input<T>(x, "predict_padded");
    const auto lengths = padded_lengths(lengths_obj, "predict_padded");
    auto xv = xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
    biaffine::score_array<T> y;
    {
        py::gil_scoped_release release;
        y = s.predict_padded(xv, lengths);
    }
    return adopt(std::move(y));
}

template <class T>
py::array predict_heads_padded(py::object self, const py::handle& x, const py::handle& lengths_obj,
                               const py::handle& heads)
{
    auto& s = called_scorer<T>(self);
    auto [a, shape] = padded_input<T>(x, "predict_heads_padded");
    const auto lengths = padded_lengths(lengths_obj, "predict_heads_padded");
    auto xv = xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
    const auto h = padded_heads(heads, shape);
    biaffine::score_array<T> y;
    {
        py::gil_scoped_release release;
        y = s.predict_heads_padded(xv, lengths, h);
    }
    return adopt(std::move(y));
}

// forward_padded (heads None) and forward_heads_padded: (y, backprop(dy) -> dx).
template <class T>
py::tuple forward_padded_any(py::object self, const py::handle& x, const py::handle& lengths_obj,
                             const py::handle& heads, bool train, const char* where)
{
    auto& s = called_scorer<T>(self, true);
    auto [a, shape] = padded_input<T>(x, where);
    const auto lengths = padded_lengths(lengths_obj, where);
    auto xv = xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape);
    const bool with_heads = !heads.is_none();
    xt::xtensor<std::int64_t, 2> h;
    if (with_heads) h = padded_heads(heads, shape);
    const biaffine::mode md = train ? biaffine::mode::train : biaffine::mode::eval;
    biaffine::score_array<T> y;
    typename py_padded_backprop<T>::fn fn;
    {
        py::gil_scoped_release release;
        auto [yy, bp] = with_heads ? s.forward_heads_padded(xv, lengths, h, md) : s.forward_padded(xv, lengths, md);
        y = std::move(yy);
        auto shared_bp = std::make_shared<std::decay_t<decltype(bp)>>(std::move(bp));
        fn = [shared_bp](const biaffine::score_array<T>& dy) { return (*shared_bp)(dy); };
    }
    py::array ya = adopt(std::move(y));
    return py::make_tuple(ya, py::cast(py_padded_backprop<T>(std::move(fn), self, a, where)));
}

py::dict cost_dict(const biaffine::batch_cost& c)
{
    py::dict d;
    d["scratch"] = c.scratch;
    d["heap"] = c.heap;
    d["saved"] = c.saved;
    d["outputs"] = c.outputs;
    d["device"] = c.device;
    d["total"] = c.total();
    return d;
}

biaffine::train_output read_train_outputs(const std::string& s)
{
    if (s == "probabilities") return biaffine::train_output::probabilities;
    if (s == "logits") return biaffine::train_output::logits;
    throw py::value_error("train_outputs must be 'probabilities' or 'logits', got '" + s + "'");
}

biaffine::compute_precision read_precision(const std::string& s, bool is_float)
{
    if (s == "fp32") return biaffine::compute_precision::fp32;
    if (s == "bf16") {
        if (!is_float) {
            throw py::value_error("precision='bf16' needs a float32 scorer (this one is float64)");
        }
        return biaffine::compute_precision::bf16;
    }
    throw py::value_error("precision must be 'fp32' or 'bf16', got '" + s + "'");
}

template <class T>
void bind_scorer(py::module_& m, const char* name)
{
    using S = scorer_t<T>;
    using score_bp = py_backprop<T, biaffine::score_view<const T>>;
    using heads_bp = py_backprop<T, biaffine::seq_view<const T>>;
    py::class_<score_bp>(m, (std::string(name) + "_backprop").c_str())
        .def("__call__", &score_bp::call, py::arg("dY"))
        .def("__bool__", &score_bp::live);
    py::class_<heads_bp>(m, (std::string(name) + "_heads_backprop").c_str())
        .def("__call__", &heads_bp::call, py::arg("dY"))
        .def("__bool__", &heads_bp::live);
    py::class_<py_padded_backprop<T>>(m, (std::string(name) + "_padded_backprop").c_str())
        .def("__call__", &py_padded_backprop<T>::call, py::arg("dy"));

    const py::object default_budget = py::cast(biaffine::budget::megabytes(16));
    py::class_<S>(m, name)
        .def(py::init([](long long n_in, long long hidden, long long labels, bool bias_u, bool bias_v, double dropout,
                         std::uint64_t seed, bool recompute, const std::string& train_outputs,
                         const std::string& precision) {
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
                 c.train_outputs = read_train_outputs(train_outputs);
                 c.precision = read_precision(precision, std::is_same<T, float>::value);
                 return std::make_unique<S>(c);
             }),
             py::arg("n_in"), py::arg("hidden") = 128, py::arg("labels") = 1, py::arg("bias_u") = true,
             py::arg("bias_v") = true, py::arg("dropout") = 0.0, py::arg("seed") = 0,
             py::arg("recompute_in_backward") = false, py::arg("train_outputs") = "probabilities",
             py::arg("precision") = "fp32")
        .def_property_readonly("dtype", [](const S&) { return py::dtype::of<T>(); })
        .def_property_readonly("n_in", &S::n_in)
        .def_property_readonly("hidden", &S::hidden)
        .def_property_readonly("labels", &S::labels)
        .def_property_readonly("bias_u", [](const S& s) { return s.config().bias_u; })
        .def_property_readonly("bias_v", [](const S& s) { return s.config().bias_v; })
        .def_property_readonly("dropout", [](const S& s) { return s.config().dropout; })
        .def_property_readonly("seed", [](const S& s) { return s.config().seed; })
        .def_property_readonly("recompute_in_backward", [](const S& s) { return s.config().recompute_in_backward; })
        .def_property_readonly("train_outputs", [](const S& s) {
            return s.config().train_outputs == biaffine::train_output::logits ? "logits" : "probabilities";
        })
        .def_property_readonly("precision", [](const S& s) {
            return s.config().precision == biaffine::compute_precision::bf16 ? "bf16" : "fp32";
        })
        .def("has_gradients", &S::has_gradients)
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
        .def("parameters_changed", &S::parameters_changed,
             "Tells the scorer its parameters were written behind its back (bf16 copies are made again).")
        .def_property_readonly("parameter_version", &S::parameter_version)
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
                 return cost_dict(s.cost(count, max_len, train ? biaffine::mode::train : biaffine::mode::eval));
             },
             py::arg("count"), py::arg("max_len"), py::arg("train") = false)
        .def("heads_cost",
             [](const S& s, std::size_t count, std::size_t max_len, bool train) {
                 return cost_dict(s.heads_cost(count, max_len, train ? biaffine::mode::train : biaffine::mode::eval));
             },
             py::arg("count"), py::arg("max_len"), py::arg("train") = false)
        .def("predict", &predict<T>, py::arg("docs"), py::arg("split_lengths"), py::kw_only(),
             py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("buffer") = 256,
             py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false,
             py::arg("output") = std::is_same<T, float>::value ? "float32" : "float64",
             "docs [n_tokens, n_in] per document, split_lengths per document -> one [n, n] (or [n, n, o]) array per "
             "split; with_splits(with_minibatch_by_padded_size(scorer, budget)). budget: a biaffine.budget or None "
             "(one batch). output='bfloat16' (float32 scorers): each score rounded to bfloat16 as its split is "
             "made (half the bytes), as ml_dtypes.bfloat16 arrays; 'bfloat16_bits': the same bytes as uint16 "
             "(biaffine.bfloat16_to_float32 widens either).")
        .def("predict_stream", &predict_stream<T>, py::arg("docs"), py::arg("split_lengths"), py::arg("callback"),
             py::kw_only(), py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("buffer") = 256,
             py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false,
             "callback(split_index, doc_index, scores [n, n(, o)]) per split: a read-only array Python owns, "
             "which the callback may keep (a kept block is never reused); the GIL is held only for the callback, "
             "whose exception stops the stream and propagates.")
        .def("forward", &forward<T>, py::arg("docs"), py::arg("split_lengths"), py::kw_only(), py::arg("train") = true,
             py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("buffer") = 256,
             py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false,
             "(Y, backprop): Y one [n, n(, o)] array per split (softmax over the last axis with train=True and "
             "train_outputs='probabilities'), backprop(dY per split) -> dX [n_tokens, n_in] per document, once.")
        .def("predict_heads", &predict_heads<T>, py::arg("docs"), py::arg("split_lengths"), py::arg("heads"),
             py::kw_only(), py::arg("budget") = default_budget, py::arg("threads") = 1, py::arg("buffer") = 256,
             py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false,
             py::arg("output") = std::is_same<T, float>::value ? "float32" : "float64",
             "Labels at given heads: heads[d] one head per token of document d (split-relative) -> one [n, o] array "
             "per split. output='bfloat16' as in predict.")
        .def("predict_heads_stream", &predict_heads_stream<T>, py::arg("docs"), py::arg("split_lengths"),
             py::arg("heads"), py::arg("callback"), py::kw_only(), py::arg("budget") = default_budget,
             py::arg("threads") = 1, py::arg("buffer") = 256, py::arg("oversize") = "run_alone",
             py::arg("pad_seq_unpad_matrix") = false,
             "callback(split_index, doc_index, labels [n, o]) per split, as predict_stream.")
        .def("forward_heads", &forward_heads<T>, py::arg("docs"), py::arg("split_lengths"), py::arg("heads"),
             py::kw_only(), py::arg("train") = true, py::arg("budget") = default_budget, py::arg("threads") = 1,
             py::arg("buffer") = 256, py::arg("oversize") = "run_alone", py::arg("pad_seq_unpad_matrix") = false,
             "(Y, backprop): Y one [n, o] array per split, backprop([n, o] per split) -> dX [n_tokens, n_in] per "
             "document, once.")
        .def("_time_cpp", &time_cpp<T>, py::arg("kind"), py::arg("docs"), py::arg("split_lengths"), py::kw_only(),
             py::arg("heads") = py::none(), py::arg("dY") = py::none(), py::arg("budget") = default_budget,
             py::arg("threads") = 1, py::arg("reps") = 1)
        .def("_time_predict_cpp",
             [](py::object self, const py::handle& docs, const py::handle& lengths, const py::object& budget,
                long long threads, int reps) {
                 return time_cpp<T>(std::move(self), "predict", docs, lengths, py::none(), py::none(), budget, threads,
                                    reps);
             },
             py::arg("docs"), py::arg("split_lengths"), py::kw_only(), py::arg("budget") = default_budget,
             py::arg("threads") = 1, py::arg("reps") = 1)
        .def("predict_padded", &predict_padded<T>, py::arg("x"), py::arg("lengths"),
             "x [b, L, n_in], lengths [b] -> [b, L, L] (or [b, L, L, o]).")
        .def("forward_padded",
             [](py::object self, const py::handle& x, const py::handle& lengths_obj, bool train) {
                 return forward_padded_any<T>(std::move(self), x, lengths_obj, py::none(), train, "forward_padded");
             },
             py::arg("x"), py::arg("lengths"), py::kw_only(), py::arg("train") = true)
        .def("predict_heads_padded", &predict_heads_padded<T>, py::arg("x"), py::arg("lengths"), py::arg("heads"),
             "x [b, L, n_in], lengths [b], heads [b, L] (integers) -> [b, L, o].")
        .def("forward_heads_padded",
             [](py::object self, const py::handle& x, const py::handle& lengths_obj, const py::handle& heads,
                bool train) {
                 if (heads.is_none()) {
                     throw py::type_error("forward_heads_padded: heads must be an integer array [b, L]");
                 }
                 return forward_padded_any<T>(std::move(self), x, lengths_obj, heads, train, "forward_heads_padded");
             },
             py::arg("x"), py::arg("lengths"), py::arg("heads"), py::kw_only(), py::arg("train") = true);
}

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
    if (is_ml_dtypes_bfloat16(a.dtype())) return run(biaffine::bfloat16{});
    throw py::type_error(std::string(where) + ": expected dtype float32, float64 or bfloat16 (ml_dtypes), got " +
                         dtype_name(a.dtype()));
}

std::vector<std::size_t> read_size_list(const py::handle& obj, const char* what)
{
    if (!py::isinstance<py::sequence>(obj) && !py::isinstance<py::array>(obj)) {
        throw py::type_error(std::string(what) + ": expected a list of non-negative integers, got " + type_of(obj));
    }
    check_length_array(obj, what);
    std::vector<std::size_t> out;
    std::size_t i = 0;
    for (py::handle x : obj) {
        const std::string name = std::string(what) + "[" + std::to_string(i++) + "]";
        const long long v = read_length(x, name);
        if (v < 0) throw biaffine::length_error(name + " must be non-negative, got " + std::to_string(v));
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

// ------------------------------------------------------------------ losses

// Per-split arrays of one dtype, viewed in place as xtensor adaptors.
template <class T>
struct split_arrays {
    std::vector<py::array_t<T>> keep;
    std::vector<decltype(xt::adapt(std::declval<const T*>(), std::size_t{}, xt::no_ownership(),
                                   std::declval<std::vector<std::size_t>>()))>
        views;
};

template <class T>
split_arrays<T> read_split_arrays(const py::sequence& seq, const std::string& what)
{
    split_arrays<T> out;
    out.keep.reserve(seq.size());
    out.views.reserve(seq.size());
    for (std::size_t k = 0; k < seq.size(); ++k) {
        out.keep.push_back(exact_array<T>(seq[k], what + "[" + std::to_string(k) + "]", -1, ""));
        const auto& a = out.keep.back();
        std::vector<std::size_t> shape(a.shape(), a.shape() + a.ndim());
        out.views.push_back(xt::adapt(a.data(), static_cast<std::size_t>(a.size()), xt::no_ownership(), shape));
    }
    return out;
}

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
    if (seq.size() != 0 && py::isinstance<py::array>(seq[0]) &&
        py::reinterpret_borrow<py::array>(seq[0]).dtype().is(py::dtype::of<double>())) {
        return run(double{});
    }
    return run(float{});
}

py::array_t<std::int64_t> to_int64(const std::vector<std::size_t>& h)
{
    py::array_t<std::int64_t> out(static_cast<py::ssize_t>(h.size()));
    for (std::size_t i = 0; i < h.size(); ++i) out.mutable_at(i) = static_cast<std::int64_t>(h[i]);
    return out;
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

// python/CMakeLists.txt builds this once per ISA variant, as _biaffine_<variant>.
#ifndef BIAFFINE_PY_MODULE
#define BIAFFINE_PY_MODULE _biaffine
#endif

PYBIND11_MODULE(BIAFFINE_PY_MODULE, m)
{
    m.doc() = "biaffine: split-batched biaffine scoring with bounded peak memory (C++ core)";
#if PYBIND11_VERSION_HEX < 0x020C0000
    // pybind11 before 2.12 reads numpy 2's arrays wrongly without an error
    // (seen: argmax_heads of a 3x3 float64 matrix all 1 under pybind11 2.10
    // and numpy 2.4): refuse to load rather than give wrong numbers.
    {
        const std::string np_version = py::module_::import("numpy").attr("__version__").cast<std::string>();
        if (std::atoi(np_version.c_str()) >= 2) {
            throw py::import_error(
                std::string("biaffine: this module was built with pybind11 ") + PYBIND11_TOSTRING(PYBIND11_VERSION_MAJOR) "." +
                PYBIND11_TOSTRING(PYBIND11_VERSION_MINOR) ", which does not support numpy 2, and numpy " + np_version +
                " is imported: install it with pip (which builds with pybind11 >= 2.12) or use numpy < 2 (Debian's "
                "python3-numpy)");
        }
    }
#endif
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
                        "A zero or too-small budget, an oversize split under oversize='throw' "
                        "(biaffine::budget_error).");
    g_exc.overflow = make("OverflowError", py::make_tuple(py::handle(g_exc.budget), builtins.attr("OverflowError")),
                          "A size computation overflows 64 bits (biaffine::overflow_error).");
    g_exc.backprop = make("BackpropError", py::make_tuple(py::handle(g_exc.error)),
                          "A backprop callback called twice or empty (biaffine::backprop_error).");
    g_exc.head = make("HeadError", py::make_tuple(py::handle(g_exc.error)),
                      "A list of heads missing, of the wrong length, or an index outside its split "
                      "(biaffine::head_error).");
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
        } catch (const biaffine::head_error& e) {
            PyErr_SetString(g_exc.head, e.what());
        } catch (const biaffine::error& e) {
            PyErr_SetString(g_exc.error, e.what());
        }
        // Anything else (std::bad_alloc -> MemoryError, pybind11's own, a
        // Python exception from a callback) goes to the default translators.
    });

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
