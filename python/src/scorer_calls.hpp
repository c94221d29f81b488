// python/src/scorer_calls.hpp - the scorer classes (biaffine_scorer_float32,
// _float64): their calls on numpy arrays, the backprop callbacks they hand
// out, and bind_scorer<T>, which scorer_float32.cpp and scorer_float64.cpp
// instantiate one each (the two compile in parallel).
#pragma once

#include "common.hpp"
#include "layers.hpp"

#include <biaffine/convert.hpp>
#include <biaffine/scorer.hpp>

namespace biaffine_py {

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
inline py::object ml_dtypes_bfloat16(const char* where)
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
// outputs) and stored rounded to nearest even as it arrives (convert_output,
// the scorer's own conversion), so the kept outputs take half the bytes;
// they go out as uint16 arrays of the bits. Not a scorer_with_output<float,
// bfloat16>: that is another object with parameters of its own, where this
// one's are the numpy views Python writes.
template <class Kind, class Args>
py::list predict_bfloat16(scorer_t<float>& s, call_args<float>& a, const Args& args, output_dtype out,
                          const char* where)
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
            m->template predict_stream_as<Kind>(
                a.dv.maps, a.ls, args, [&](std::size_t k, std::size_t, typename Kind::template view<const float> v) {
                    const std::size_t n = Kind::tokens(v);
                    Y[k] = Kind::template new_output<bfloat16>(n, o);
                    biaffine::convert_output(Kind::dense(Y[k].data(), n, o), v);
                });
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
        if (out != output_dtype::own) return predict_bfloat16<biaffine::full_scores_kind>(s, a, biaffine::no_heads{}, out, "predict");
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
inline py::function read_callback(const py::handle& cb, const char* where)
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
        if (out != output_dtype::own) return predict_bfloat16<biaffine::labels_at_heads_kind>(s, a, a.hs, out, "predict_heads");
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

// forward (Kind = full_scores_kind) and forward_heads (labels_at_heads_kind,
// `args_of(a)` the heads): (Y, backprop). `heads`: null for a kind without.
template <class T, class Kind, class ArgsOf>
py::tuple forward_any(py::object self, const char* where, const py::handle& docs, const py::handle& lengths,
                      const py::handle* heads, ArgsOf&& args_of, bool train, const py::object& budget,
                      long long threads, long long buffer, const std::string& oversize, bool pad)
{
    using View = typename Kind::template view<const T>;
    using bp_t = py_backprop<T, View>;
    auto& s = called_scorer<T>(self, true);
    call_args<T> a(where, docs, lengths, heads, budget, threads, buffer, oversize, pad);
    const biaffine::mode md = train ? biaffine::mode::train : biaffine::mode::eval;
    biaffine::score_list<T> Y;
    typename bp_t::fn fn;
    {
        py::gil_scoped_release release;
        with_model(s, a.o, [&](auto& m) {
            auto [y, bp] = m->template forward_as<Kind>(a.dv.maps, a.ls, args_of(a), md);
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
    return forward_any<T, biaffine::full_scores_kind>(
        std::move(self), "forward", docs, lengths, nullptr, [](const call_args<T>&) { return biaffine::no_heads{}; },
        train, budget, threads, buffer, oversize, pad);
}

template <class T>
py::tuple forward_heads(py::object self, const py::handle& docs, const py::handle& lengths, const py::handle& heads,
                        bool train, const py::object& budget, long long threads, long long buffer,
                        const std::string& oversize, bool pad)
{
    return forward_any<T, biaffine::labels_at_heads_kind>(
        std::move(self), "forward_heads", docs, lengths, &heads,
        [](const call_args<T>& a) -> const auto& { return a.hs; }, train, budget, threads, buffer, oversize, pad);
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
inline xt::xtensor<std::int64_t, 2> padded_heads(const py::handle& heads, const std::array<std::size_t, 3>& xs)
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
inline std::vector<std::int64_t> padded_lengths(const py::handle& obj, const char* where)
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

inline py::dict cost_dict(const biaffine::batch_cost& c)
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

inline biaffine::train_output read_train_outputs(const std::string& s)
{
    if (s == "probabilities") return biaffine::train_output::probabilities;
    if (s == "logits") return biaffine::train_output::logits;
    throw py::value_error("train_outputs must be 'probabilities' or 'logits', got '" + s + "'");
}

inline biaffine::compute_precision read_precision(const std::string& s, bool is_float)
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

}  // namespace biaffine_py
