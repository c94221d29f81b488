// biaffine/with_splits.hpp - documents in, one score matrix per split out.
//
// Input: per-document token representations (`[n_tokens, n_in]`, xtensor or
// Eigen, float or double, any strides) and each document's split lengths. The
// inner layer gets the flat list of splits as views into the documents (no
// copy). Output: one `[n, n(, o)]` matrix per split, documents in order and
// splits in order inside each: splits differ in size, so the matrices cannot
// be concatenated per document. Backprop takes per-split gradients and returns
// per-document `dX [n_tokens, n_in]` - not symmetric, on purpose.
//
// The split list is computed lazily from the lengths (a cursor, not an array),
// so inference keeps O(documents) bookkeeping however many splits there are.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include "biaffine/backprop.hpp"
#include "biaffine/detail/checked.hpp"
#include "biaffine/detail/output_kind.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/layer.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

namespace detail {

template <class I>
std::size_t checked_length(I v, std::size_t doc, std::size_t split)
{
    if constexpr (std::is_signed<I>::value) {
        if (v < 0) {
            throw length_error(msg("document ", doc, ", split ", split, ": negative length ", v));
        }
    }
    return static_cast<std::size_t>(v);
}

}  // namespace detail

/// The flat list of splits of a set of documents, as `[n, n_in]` views in
/// document order. Not thread-safe (a mutable cursor): one per call, one
/// thread at a time. It reads the caller's split lengths (`Lengths`: a range of
/// per-document integer ranges) through a cursor, so sequential access is O(1)
/// and nothing is stored per split: a pass over a million splits allocates
/// nothing.
template <class T, class Lengths>
class split_sequence {
    using outer_iter = decltype(std::begin(std::declval<const Lengths&>()));
    using inner_iter = decltype(std::begin(*std::declval<outer_iter>()));

public:
    /// `docs` views, the caller's `lengths`, and `first_split[d]`, the index
    /// of document d's first split (n_docs + 1 entries, the last = size()).
    /// `kept`: further bytes its owner keeps for the whole call (reported
    /// with the index by bookkeeping_bytes()).
    split_sequence(span<const seq_view<const T>> docs, const Lengths& lengths, span<const std::size_t> first_split,
                   std::uint64_t kept = 0)
        : docs_(docs), lengths_(&lengths), first_(first_split), kept_(kept)
    {
        rewind(0);
    }

    /// Number of splits over all documents.
    std::size_t size() const noexcept { return first_.empty() ? 0 : first_[first_.size() - 1]; }

    /// Tracked bytes of the per-document index behind this list (document
    /// views, first-split offsets), alive for the whole call, and what the
    /// owner keeps besides (`kept`): a batcher under a byte budget pays them
    /// out of the budget with its own.
    std::uint64_t bookkeeping_bytes() const noexcept
    {
        return docs_.size() * sizeof(seq_view<const T>) + first_.size() * sizeof(std::size_t) + kept_;
    }

    /// Split k as a view into its document.
    seq_view<const T> operator[](std::size_t k) const
    {
        seek(k);
        return docs_[doc_].rows_view(row_, static_cast<std::size_t>(*len_));
    }

    /// The document split k belongs to.
    std::size_t document_of(std::size_t k) const
    {
        seek(k);
        return doc_;
    }

private:
    void rewind(std::size_t doc) const
    {
        doc_ = doc;
        outer_ = std::next(std::begin(*lengths_), static_cast<std::ptrdiff_t>(doc));
        k_ = first_[doc];
        row_ = 0;
        skip_finished_documents();
    }
    void skip_finished_documents() const
    {
        while (doc_ + 1 < docs_.size() && k_ >= first_[doc_ + 1]) {
            ++doc_;
            ++outer_;
            row_ = 0;
        }
        if (doc_ < docs_.size() && k_ < first_[doc_ + 1]) {
            len_ = std::next(std::begin(*outer_), static_cast<std::ptrdiff_t>(k_ - first_[doc_]));
        }
    }
    void seek(std::size_t k) const
    {
        if (k < k_) {
            rewind(static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end(), k) - first_.begin()) - 1);
        }
        while (k_ < k) {
            row_ += static_cast<std::size_t>(*len_);
            ++k_;
            if (k_ < first_[doc_ + 1]) {
                ++len_;
            } else {
                skip_finished_documents();
            }
        }
    }

    span<const seq_view<const T>> docs_;
    const Lengths* lengths_;
    span<const std::size_t> first_;  // first split index of each document, n_docs + 1 entries
    std::uint64_t kept_ = 0;
    mutable std::size_t k_ = 0, doc_ = 0, row_ = 0;
    mutable outer_iter outer_{};
    mutable inner_iter len_{};
};

/// See the file comment. `Inner` is any split-list layer (check_split_layer):
/// biaffine_scorer, with_minibatch_by_padded_size, with_pad_seq_unpad_matrix
/// or your own.
///
/// Thread safety: as its inner layer's. With the library's layers, `predict`
/// and `predict_stream` are const and may run concurrently from several
/// threads on one layer (and one scorer); `forward` and the backprop
/// callbacks must be serialised per scorer. NaN / Inf in one document's rows
/// reach only the scores (and input gradients) of the splits that contain
/// them (see biaffine_scorer).
template <class Inner>
class with_splits_layer : public detail::wrapping_layer<Inner> {
    static_assert(check_split_layer<Inner>());
    using base = detail::wrapping_layer<Inner>;
    using base::inner_;
    using typename base::inner_type;

public:
    using typename base::value_type;
    using typename base::output_type;
    using T = value_type;
    using O = output_type;
    /// Per-document input gradients `[n_tokens, n_in]`.
    using doc_grads = tracked_vector<tensor<T, 2>>;
    /// Callback of forward(): per-split dY views (of the output type) in (see
    /// grad_views), per-document dX out.
    using backprop_type = backprop_fn<doc_grads(span<const score_view<const O>>)>;

    /// Wraps `inner` (held by reference when an lvalue).
    explicit with_splits_layer(Inner&& inner) : base(std::forward<Inner>(inner)) {}

    /// Scores of every split of every document: `[n, n(, o)]` each, documents
    /// in order, splits in order inside each. `docs[d]` is `[n_tokens_d,
    /// n_in]`; `split_lengths[d]` sums to n_tokens_d.
    template <class Docs, class Lengths>
    score_list<O> predict(const Docs& docs, const Lengths& split_lengths) const
    {
        return predict_as<detail::full_scores_kind>(docs, split_lengths, detail::no_heads{});
    }

    /// Streaming: `sink(split_index, doc_index, score_view<const O>)` per
    /// split (in batch order when the inner layer batches); the view is valid
    /// only during the call. Nothing is kept per split.
    template <class Docs, class Lengths, class Sink>
    void predict_stream(const Docs& docs, const Lengths& split_lengths, Sink&& sink) const
    {
        predict_stream_as<detail::full_scores_kind>(docs, split_lengths, detail::no_heads{}, sink);
    }

    /// Streaming into the caller's memory: `dest(split_index, doc_index,
    /// n)` returns where the split's `[n, n(, o)]` scores go (an `O*` to
    /// n*n*o elements, written dense in C order) just before they are
    /// written, then `sink(split_index, doc_index, view)` views them there
    /// (see biaffine_scorer::predict_stream_into). The memory is the caller's.
    template <class Docs, class Lengths, class Dest, class Sink>
    void predict_stream_into(const Docs& docs, const Lengths& split_lengths, Dest&& dest, Sink&& sink) const
    {
        predict_stream_into_as<detail::full_scores_kind>(docs, split_lengths, detail::no_heads{}, dest, sink);
    }

    /// Training forward: the per-split scores and a callback that takes
    /// per-split gradients (a range of `[n, n(, o)]` arrays, or views) and
    /// returns per-document `dX`. Documents must outlive the callback.
    template <class Docs, class Lengths>
    std::pair<score_list<O>, backprop_type> forward(const Docs& docs, const Lengths& split_lengths,
                                                    mode m = mode::train)
    {
        return forward_as<detail::full_scores_kind>(docs, split_lengths, detail::no_heads{}, m);
    }

    // ------------------------------------------- labels at given heads

    /// Callback of forward_heads(): per-split `[n, o]` dY views in (see
    /// head_grad_views), per-document dX out.
    using heads_backprop_type = backprop_fn<doc_grads(span<const seq_view<const O>>)>;

    /// Labels at given heads: `heads[d]` holds one head per token of document
    /// d (a contiguous range of integers, e.g. `std::vector<int>`), each
    /// relative to its split (`0..n-1`, the root pointing at itself as
    /// mst_heads returns it). One `[n, o]` tensor per split, in the order of
    /// predict(). A missing list, a wrong length or an index outside its
    /// split throws head_error naming document, split and token. Needs an
    /// inner layer with the heads members (check_heads_layer).
    template <class Docs, class Lengths, class Heads>
    score_list<O> predict_heads(const Docs& docs, const Lengths& split_lengths, const Heads& heads) const
    {
        static_assert(check_heads_layer<inner_type>());
        return predict_as<detail::labels_at_heads_kind>(docs, split_lengths, heads);
    }

    /// Streaming labels at given heads: `sink(split_index, doc_index,
    /// seq_view<const O>)` with split k's `[n, o]`, valid during the call.
    template <class Docs, class Lengths, class Heads, class Sink>
    void predict_heads_stream(const Docs& docs, const Lengths& split_lengths, const Heads& heads, Sink&& sink) const
    {
        static_assert(check_heads_layer<inner_type>());
        predict_stream_as<detail::labels_at_heads_kind>(docs, split_lengths, heads, sink);
    }

    /// Streaming labels at given heads into the caller's memory: `dest(split_index,
    /// doc_index, n)` gives an `O*` to n*o elements (see predict_stream_into).
    template <class Docs, class Lengths, class Heads, class Dest, class Sink>
    void predict_heads_stream_into(const Docs& docs, const Lengths& split_lengths, const Heads& heads, Dest&& dest,
                                   Sink&& sink) const
    {
        static_assert(check_heads_layer<inner_type>());
        predict_stream_into_as<detail::labels_at_heads_kind>(docs, split_lengths, heads, dest, sink);
    }

    /// Training forward of labels at given heads: `[n, o]` per split and a
    /// callback taking per-split `[n, o]` gradients, returning per-document
    /// dX. Documents must outlive the callback; the heads need not.
    template <class Docs, class Lengths, class Heads>
    std::pair<score_list<O>, heads_backprop_type> forward_heads(const Docs& docs, const Lengths& split_lengths,
                                                                const Heads& heads, mode m = mode::train)
    {
        static_assert(check_heads_layer<inner_type>());
        return forward_as<detail::labels_at_heads_kind>(docs, split_lengths, heads, m);
    }

    // ------------------------------------------- any output kind
    //
    // The calls above for an output kind `Kind` (detail/output_kind.hpp)
    // with its arguments per document `a` (heads, or detail::no_heads{}):
    // Kind's layer calls on the inner layer, with the arguments split as the
    // documents are (Kind::document_args; their bytes paid out of a
    // batcher's budget).

    /// Callback of forward_as<Kind>(): per-split gradients of Kind's view in,
    /// per-document dX out.
    template <class Kind>
    using kind_backprop = backprop_fn<doc_grads(span<const typename Kind::template view<const O>>)>;

    template <class Kind, class Docs, class Lengths, class Args>
    score_list<O> predict_as(const Docs& docs, const Lengths& split_lengths, const Args& a) const
    {
        prepared p = prepare(docs, split_lengths);
        const auto args = Kind::document_args(p, split_lengths, a);
        return Kind::predict(inner_, p.sequence(split_lengths, Kind::args_bytes(args)), Kind::args_of(args));
    }

    template <class Kind, class Docs, class Lengths, class Args, class Sink>
    void predict_stream_as(const Docs& docs, const Lengths& split_lengths, const Args& a, Sink&& sink) const
    {
        prepared p = prepare(docs, split_lengths);
        const auto args = Kind::document_args(p, split_lengths, a);
        Kind::predict_stream(inner_, p.sequence(split_lengths, Kind::args_bytes(args)), Kind::args_of(args),
                             [&](std::size_t k, typename Kind::template view<const O> y) {
                                 sink(k, p.document_of(k), y);
                             });
    }

    template <class Kind, class Docs, class Lengths, class Args, class Dest, class Sink>
    void predict_stream_into_as(const Docs& docs, const Lengths& split_lengths, const Args& a, Dest&& dest,
                                Sink&& sink) const
    {
        prepared p = prepare(docs, split_lengths);
        const auto args = Kind::document_args(p, split_lengths, a);
        Kind::predict_stream_into(
            inner_, p.sequence(split_lengths, Kind::args_bytes(args)), Kind::args_of(args),
            [&](std::size_t k, std::size_t n) { return dest(k, p.document_of(k), n); },
            [&](std::size_t k, typename Kind::template view<const O> y) { sink(k, p.document_of(k), y); });
    }

    template <class Kind, class Docs, class Lengths, class Args>
    std::pair<score_list<O>, kind_backprop<Kind>> forward_as(const Docs& docs, const Lengths& split_lengths,
                                                             const Args& a, mode m = mode::train)
    {
        prepared p = prepare(docs, split_lengths);
        const auto args = Kind::document_args(p, split_lengths, a);
        // Paid out of the batcher's budget: the per-split arguments.
        return forward_kind<Kind>(std::move(p), split_lengths, Kind::args_bytes(args), [&](const auto& seq) {
            return Kind::forward(inner_, seq, Kind::args_of(args), m);
        });
    }

    /// Convenience: heads backprop from owning per-split `[n, o]` arrays.
    template <class Grads>
    static tracked_vector<seq_view<const O>> head_grad_views(const Grads& dY)
    {
        return kind_grad_views<detail::labels_at_heads_kind>(dY);
    }

    /// Convenience: backprop from owning per-split gradient arrays (e.g. a
    /// score_list of the output's shapes).
    template <class Grads>
    static tracked_vector<score_view<const O>> grad_views(const Grads& dY)
    {
        return kind_grad_views<detail::full_scores_kind>(dY);
    }

private:
    // Views of owning per-split gradient arrays of an output kind; a bad one
    // throws shape_error naming its split.
    template <class Kind, class Grads>
    static tracked_vector<typename Kind::template view<const O>> kind_grad_views(const Grads& dY)
    {
        tracked_vector<typename Kind::template view<const O>> v;
        v.reserve(detail::range_size(dY));
        std::size_t k = 0;
        for (const auto& g : dY) {
            try {
                v.push_back(Kind::const_view_of(g));
            } catch (const shape_error& e) {
                throw shape_error(detail::msg("split gradient ", k, ": ", e.what()));
            }
            ++k;
        }
        return v;
    }

    // Document views, flattened split lengths and each document's first split.
    struct prepared {
        tracked_vector<seq_view<const T>> docs;
        tracked_vector<std::size_t> first;
        template <class Lengths>
        split_sequence<T, Lengths> sequence(const Lengths& lengths, std::uint64_t kept = 0) const
        {
            return split_sequence<T, Lengths>(span<const seq_view<const T>>(docs.data(), docs.size()), lengths,
                                              span<const std::size_t>(first.data(), first.size()), kept);
        }
        std::size_t document_of(std::size_t k) const
        {
            return static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), k) - first.begin()) - 1;
        }
    };

    // One training forward of an output kind (detail/output_kind.hpp):
    // `call(seq)` runs the inner layer's forward of that kind on the split
    // sequence; `extra` is what the call keeps besides what every forward
    // keeps (the flat lengths and, in backprop, one dX view per split), paid
    // out of the batcher's budget. The callback checks the per-split
    // gradients and returns per-document dX.
    template <class Kind, class Lengths, class Call>
    auto forward_kind(prepared p, const Lengths& split_lengths, std::uint64_t extra, Call&& call)
    {
        using grad = typename Kind::template view<const O>;
        const std::uint64_t kept = detail::checked_add(
            extra,
            detail::checked_mul(p.first.back(), sizeof(std::size_t) + sizeof(seq_view<T>), "with_splits bookkeeping"),
            "with_splits bookkeeping");
        auto [Y, inner_bp] = call(p.sequence(split_lengths, kept));
        const std::size_t n_in = inner_.n_in(), o = inner_.labels();
        // Training keeps the flat lengths for backward (the caller's may be gone).
        tracked_vector<std::size_t> lengths = flat_lengths(p, split_lengths);
        backprop_fn<doc_grads(span<const grad>)> bp([p = std::move(p), lengths = std::move(lengths),
                                                     inner_bp = std::move(inner_bp), n_in,
                                                     o](span<const grad> dY) mutable {
            const std::size_t n_splits = lengths.size();
            if (dY.size() != n_splits) {
                throw shape_error(detail::msg("with_splits backprop: expected ", n_splits, " split gradients, got ",
                                              dY.size()));
            }
            for (std::size_t k = 0; k < n_splits; ++k) {
                Kind::template check_document_grad<O>("with_splits backprop", k, dY[k], lengths[k], o,
                                                      p.document_of(k));
            }
            return backprop_documents(p, lengths, n_in, [&](span<const seq_view<T>> slots) { inner_bp(dY, slots); });
        });
        return std::make_pair(std::move(Y), std::move(bp));
    }

private:

    template <class Lengths>
    static tracked_vector<std::size_t> flat_lengths(const prepared& p, const Lengths& split_lengths)
    {
        tracked_vector<std::size_t> lengths;
        lengths.reserve(p.first.back());
        for (const auto& ls : split_lengths) {
            for (const auto& len : ls) lengths.push_back(static_cast<std::size_t>(len));
        }
        return lengths;
    }

    // Per-document dX, per-split slots into them, `inner(slots)` fills them.
    // Zero-filled first unless the inner layer writes every slot (the split
    // lengths of a document cover its rows): over 100k tokens the fill was
    // 1.7% of a training step (AVX-512 Xeon model 207).
    template <class Inner_bp>
    static doc_grads backprop_documents(const prepared& p, const tracked_vector<std::size_t>& lengths,
                                        std::size_t n_in, Inner_bp&& inner)
    {
        const std::size_t n_splits = lengths.size(), n_docs = p.docs.size();
        doc_grads dX;
        dX.reserve(n_docs);
        for (std::size_t d = 0; d < n_docs; ++d) {
            detail::to_index_size(detail::checked_product("document gradient", p.docs[d].rows, n_in, sizeof(T)),
                                  "document gradient");
            dX.push_back(tensor<T, 2>::from_shape({p.docs[d].rows, n_in}));
            if constexpr (!detail::writes_every_slot<Inner>::value) {
                std::fill_n(dX.back().data(), dX.back().size(), T(0));
            }
        }
        tracked_vector<seq_view<T>> slots(n_splits);
        for (std::size_t d = 0, k = 0; d < n_docs; ++d) {
            std::size_t row = 0;
            for (; k < p.first[d + 1]; ++k) {
                slots[k] = {dX[d].data() + row * n_in, lengths[k], n_in, static_cast<std::ptrdiff_t>(n_in), 1};
                row += lengths[k];
            }
        }
        inner(span<const seq_view<T>>(slots.data(), n_splits));
        return dX;
    }

    template <class Docs, class Lengths>
    prepared prepare(const Docs& docs, const Lengths& split_lengths) const
    {
        const std::size_t n_docs = detail::range_size(docs);
        if (detail::range_size(split_lengths) != n_docs) {
            throw shape_error(detail::msg("with_splits: ", n_docs, " documents but ",
                                          detail::range_size(split_lengths), " lists of split lengths"));
        }
        prepared p;
        p.docs.reserve(n_docs);
        p.first.reserve(n_docs + 1);
        std::size_t n_splits = 0;
        auto lit = std::begin(split_lengths);
        std::size_t d = 0;
        for (const auto& doc : docs) {
            seq_view<const T> v = as_const_view(doc);
            if (v.cols != inner_.n_in()) {
                throw shape_error(detail::msg("with_splits: document ", d, " has width ", v.cols,
                                              ", the scorer expects n_in = ", inner_.n_in()));
            }
            p.first.push_back(n_splits);
            std::uint64_t sum = 0;
            std::size_t s = 0;
            for (const auto& len : *lit) {
                const std::size_t n = detail::checked_length(len, d, s++);
                sum = detail::checked_add(sum, n, "split lengths");
                ++n_splits;
            }
            if (sum != v.rows) {
                throw shape_error(detail::msg("with_splits: document ", d, ": split lengths sum to ", sum,
                                              " but the document has ", v.rows, " rows"));
            }
            p.docs.push_back(v);
            ++lit;
            ++d;
        }
        p.first.push_back(n_splits);
        return p;
    }
};

/// Factory: `with_splits(inner)`. An lvalue is held by reference (it must
/// outlive the layer), an rvalue moved in.
template <class Inner>
auto with_splits(Inner&& inner)
{
    return with_splits_layer<Inner>(std::forward<Inner>(inner));
}

BIAFFINE_NAMESPACE_END
