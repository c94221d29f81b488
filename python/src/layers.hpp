// python/src/layers.hpp - the layer stack a scorer call runs on: the options
// (budget, threads, buffer, oversize, padding) and the composition they ask for.
#pragma once

#include "common.hpp"

#include <biaffine/scorer.hpp>
#include <biaffine/with_minibatch_by_padded_size.hpp>
#include <biaffine/with_pad_seq_unpad_matrix.hpp>
#include <biaffine/with_splits.hpp>

namespace biaffine_py {

// ------------------------------------------------------------ options

struct run_options {
    std::optional<biaffine::budget> budget;  // none: one batch, no batcher
    biaffine::batch_options batch;
    bool pad = false;  // with_pad_seq_unpad_matrix (the reference's padding)
};

inline biaffine::oversize_policy read_oversize(const std::string& s)
{
    if (s == "run_alone") return biaffine::oversize_policy::run_alone;
    if (s == "throw") return biaffine::oversize_policy::throw_error;
    throw py::value_error("oversize must be 'run_alone' or 'throw', got '" + s + "'");
}

inline run_options read_options(const py::object& budget, long long threads, long long buffer,
                                const std::string& oversize, bool pad)
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

}  // namespace biaffine_py
