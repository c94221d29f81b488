// python/src/common.hpp - what the parts of the extension share: the Python
// errors, reading numpy inputs (documents, lengths, counts, heads) and
// handing C++ tensors out as numpy arrays without a copy; and the binders
// each part defines (module.cpp calls them). Everything here is in
// biaffine_py and inline: the extension is several translation units.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <xtensor/xadapt.hpp>

#include <biaffine/abi.hpp>
#include <biaffine/batching.hpp>
#include <biaffine/bfloat16.hpp>
#include <biaffine/errors.hpp>
#include <biaffine/tensor.hpp>

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

namespace biaffine_py {

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
inline exception_types g_exc;

[[noreturn]] inline void throw_shape(const std::string& what)
{
    // Raised from the binding for rows of the bad-input table it checks
    // itself (e.g. as-view-rank): the same class the C++ layer would give.
    throw biaffine::shape_error(what);
}

inline std::string dtype_name(const py::dtype& d) { return std::string(py::str(py::handle(d))); }

// An ml_dtypes.bfloat16 dtype (2 bytes, the bits of biaffine::bfloat16).
inline bool is_ml_dtypes_bfloat16(const py::dtype& d)
{
    return d.itemsize() == 2 && dtype_name(d) == "bfloat16";
}

template <class T>
const char* type_name()
{
    return sizeof(T) == sizeof(double) ? "float64" : "float32";
}

inline std::string type_of(const py::handle& h)
{
    return py::str(py::type::of(h).attr("__name__")).cast<std::string>();
}

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

// A 2-d square score matrix [n, n] of `item`-byte elements: (n, row stride
// in elements). Rows may be strided (a block of a padded batch), elements
// not.
inline std::pair<std::size_t, std::size_t> square_rows(const py::array& a, std::size_t item, const std::string& where)
{
    if (a.ndim() != 2) {
        throw_shape(where + ": expected a square [n, n] score matrix, got " + std::to_string(a.ndim()) +
                    " dimensions");
    }
    if (a.shape(0) != a.shape(1)) {
        throw_shape(where + ": expected a square [n, n] score matrix, got [" + std::to_string(a.shape(0)) + ", " +
                    std::to_string(a.shape(1)) + "]");
    }
    const auto n = static_cast<std::size_t>(a.shape(0));
    const auto size = static_cast<py::ssize_t>(item);
    if (n > 1 && (a.strides(1) != size || a.strides(0) <= 0 || a.strides(0) % size != 0)) {
        throw py::value_error(where +
                              ": each row must be contiguous (row stride a positive multiple of the item size); "
                              "pass np.ascontiguousarray(...)");
    }
    return {n, n > 1 ? static_cast<std::size_t>(a.strides(0) / size) : n};
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
inline bool is_bool(const py::handle& x)
{
    // numpy.bool_, looked up once (numpy is loaded with this module); the
    // reference is kept for the process, so no destructor runs at exit.
    static const py::handle np_bool = py::object(py::module_::import("numpy").attr("bool_")).release();
    return py::isinstance<py::bool_>(x) || py::isinstance(x, np_bool);
}

// One length (a split length, a sentence length, a head index): an integer,
// not a bool, not a float, that fits a signed 64-bit size. Negative values
// pass through (the C++ layer names them: "negative length").
inline long long read_length(const py::handle& x, const std::string& what)
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
inline void check_length_array(const py::handle& l, const std::string& what)
{
    if (!py::isinstance<py::array>(l)) return;
    const auto dt = py::reinterpret_borrow<py::array>(l).dtype();
    if (dt.kind() != 'i' && dt.kind() != 'u') {
        throw py::type_error(what + " must hold integers, got dtype " + dtype_name(dt));
    }
}

inline lengths_t read_lengths(const py::handle& lengths, const char* what)
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
inline std::uint64_t read_count(const py::handle& x, const std::string& what)
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
inline biaffine::budget budget_megabytes(const py::handle& mb)
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

inline std::vector<std::int64_t> read_int_row(const py::handle& l, const std::string& what)
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

inline heads_t read_int_lists(const py::handle& obj, const std::string& what)
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

// Per-split arrays of one dtype, viewed in place as xtensor adaptors.
template <class T>
struct split_arrays {
    std::vector<py::array_t<T>> keep;
    std::vector<decltype(xt::adapt(std::declval<const T*>(), std::size_t{}, xt::no_ownership(),
                                   std::declval<std::vector<std::size_t>>()))>
        views;
};

template <class T>
inline split_arrays<T> read_split_arrays(const py::sequence& seq, const std::string& what)
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

// A list of per-split arrays is read as float64 when its first one is.
inline bool first_is_float64(const py::sequence& seq)
{
    return seq.size() != 0 && py::isinstance<py::array>(seq[0]) &&
           py::reinterpret_borrow<py::array>(seq[0]).dtype().is(py::dtype::of<double>());
}

// Heads (or labels) as a 1-d int64 array.
inline py::array_t<std::int64_t> to_int64(const std::vector<std::size_t>& h)
{
    py::array_t<std::int64_t> out(static_cast<py::ssize_t>(h.size()));
    for (std::size_t i = 0; i < h.size(); ++i) out.mutable_at(i) = static_cast<std::int64_t>(h[i]);
    return out;
}

template <class T>
py::list adopt_scores(biaffine::score_list<T>& Y)
{
    py::list out;
    for (auto& y : Y) out.append(adopt(std::move(y)));
    Y.clear();
    return out;
}

inline std::vector<std::size_t> read_size_list(const py::handle& obj, const char* what)
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

inline py::dtype dtype_of(const py::handle& obj)
{
    if (!py::isinstance<py::array>(obj)) {
        throw py::type_error("pairwise_bilinear: u must be a numpy array, got " + type_of(obj));
    }
    return py::reinterpret_borrow<py::array>(obj).dtype();
}

// ---------------------------------------------------------------- binders

// Each part of the module adds its names (the file that defines it, in the
// order module.cpp calls them).
void bind_build_info(py::module_& m);    // build_info.cpp: _build_info()
void bind_budget(py::module_& m);        // layers.cpp: the budget class
void bind_scorer_float32(py::module_& m);  // scorer_float32.cpp
void bind_scorer_float64(py::module_& m);  // scorer_float64.cpp
void bind_decoding(py::module_& m);      // decoding.cpp: decoders, losses, is_tree
void bind_tree_crf(py::module_& m);      // tree_crf.cpp: log Z, arc marginals, the tree CRF loss, MBR heads
void bind_layers(py::module_& m);        // layers.cpp: splitting, batching, the bilinear kernel
void bind_io(py::module_& m);            // io.cpp: .npy save / load, memory accounting

}  // namespace biaffine_py
