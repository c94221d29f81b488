// dump_paths - a tool (not a test): runs every scoring path on fixed seeded
// inputs and writes its scores, dX and every parameter gradient as raw bytes,
// so a refactor that must not change results can be checked with `cmp`
// against dumps taken before it (one per backend build).
//
//   dump_paths OUT.bin [OUT.idx]
//
// Paths: the scorer's predict / predict_stream, forward (train with
// probabilities and with logits, dropout, recompute_in_backward, eval) and
// its backward; labels at heads (predict_heads, forward_heads and backward);
// the padded interface (both kinds); with_splits over the batcher over the
// scorer and over with_pad_seq_unpad_matrix (both kinds, forward and
// backward); float and double, and float in compute_precision::bf16
// (inference and training); predict again after parameters_changed() and
// after unannounced writes under watch_parameter_writes(); one label and
// several. OUT.idx lists each record's name, offset and bytes, to
// find the first differing path.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "biaffine/biaffine.hpp"

using namespace biaffine;

namespace {

std::ofstream g_out, g_idx;
std::uint64_t g_off = 0;

void put(const std::string& name, const void* p, std::size_t bytes)
{
    g_out.write(static_cast<const char*>(p), static_cast<std::streamsize>(bytes));
    if (g_idx) g_idx << name << ' ' << g_off << ' ' << bytes << '\n';
    g_off += bytes;
}

template <class A>
void put_array(const std::string& name, const A& a)
{
    put(name, a.data(), a.size() * sizeof(typename A::value_type));
}

template <class S>
void put_grads(const std::string& name, const S& s)
{
    for (const auto& p : s.parameters()) put(name + "/d" + p.name, p.grad, p.size * sizeof(*p.grad));
}

template <class T>
tensor<T, 2> random_matrix(std::mt19937_64& rng, std::size_t r, std::size_t c)
{
    tensor<T, 2> x = tensor<T, 2>::from_shape({r, c});
    std::normal_distribution<double> nd(0.0, 1.0);
    for (auto& v : x) v = static_cast<T>(nd(rng));
    return x;
}

template <class T>
void run_config(const std::string& tag, scorer_config cfg)
{
    std::mt19937_64 rng(cfg.seed * 31 + 7);
    const std::size_t n_in = cfg.n_in, o = cfg.labels;
    // Two documents, splits of mixed lengths (one empty, one long).
    const std::vector<std::vector<std::size_t>> lens = {{3, 1, 17, 0, 40, 5}, {29, 2, 64, 8}};
    std::vector<tensor<T, 2>> docs;
    std::vector<std::vector<int>> heads;
    for (const auto& l : lens) {
        std::size_t total = 0;
        std::vector<int> h;
        for (std::size_t n : l) {
            for (std::size_t m = 0; m < n; ++m) h.push_back(static_cast<int>(rng() % n));
            total += n;
        }
        docs.push_back(random_matrix<T>(rng, total, n_in));
        heads.push_back(h);
    }
    // The split list of the scorer: every split of every document.
    std::vector<seq_view<const T>> X;
    std::vector<std::vector<int>> H;
    for (std::size_t d = 0; d < docs.size(); ++d) {
        std::size_t row = 0, hr = 0;
        for (std::size_t n : lens[d]) {
            X.push_back(seq_view<const T>{docs[d].data() + row * n_in, n, n_in, static_cast<std::ptrdiff_t>(n_in), 1});
            H.emplace_back(heads[d].begin() + static_cast<std::ptrdiff_t>(hr),
                           heads[d].begin() + static_cast<std::ptrdiff_t>(hr + n));
            row += n;
            hr += n;
        }
    }
    // Fixed gradients of the outputs.
    auto score_grads = [&](const score_list<T>& Y) {
        std::vector<score_tensor<T>> g;
        std::mt19937_64 r2(99);
        std::normal_distribution<double> nd(0.0, 1.0);
        for (const auto& y : Y) {
            score_tensor<T> t = y;
            for (auto& v : t) v = static_cast<T>(nd(r2));
            g.push_back(std::move(t));
        }
        return g;
    };
    std::vector<seq_view<T>> dx_slots;
    std::vector<tensor<T, 2>> dx_store;
    auto new_dx = [&] {
        dx_store.clear();
        dx_slots.clear();
        for (const auto& x : X) dx_store.push_back(tensor<T, 2>::from_shape({x.rows, n_in}));
        for (auto& d : dx_store) {
            dx_slots.push_back(seq_view<T>{d.data(), d.shape()[0], n_in, static_cast<std::ptrdiff_t>(n_in), 1});
        }
    };
    auto put_list = [&](const std::string& name, const score_list<T>& Y) {
        for (std::size_t k = 0; k < Y.size(); ++k) put_array(name + "/" + std::to_string(k), Y[k]);
    };
    auto put_dx = [&](const std::string& name) {
        for (std::size_t k = 0; k < dx_store.size(); ++k) put_array(name + "/dx" + std::to_string(k), dx_store[k]);
    };
    const span<const seq_view<const T>> Xs(X.data(), X.size());

    // --- the scorer over split lists
    {
        biaffine_scorer<T> s(cfg);
        put_list(tag + "/predict", s.predict(Xs));
        s.predict_stream(Xs, [&](std::size_t k, score_view<const T> v) {
            for (std::size_t m = 0; m < v.n; ++m) {
                put(tag + "/stream/" + std::to_string(k), v.data + static_cast<std::ptrdiff_t>(m) * v.row_stride,
                    v.n * v.labels * sizeof(T));
            }
        });
        put_list(tag + "/predict_heads", s.predict_heads(Xs, H));
        s.predict_heads_stream(Xs, H, [&](std::size_t k, seq_view<const T> v) {
            for (std::size_t m = 0; m < v.rows; ++m) {
                put(tag + "/heads_stream/" + std::to_string(k), v.data + static_cast<std::ptrdiff_t>(m) * v.row_stride,
                    v.cols * sizeof(T));
            }
        });
        // New parameters (a step, then parameters_changed): the weights the
        // backend prepared (bf16: packed) are made again; then the same
        // change written without telling the scorer, found by watching.
        const auto params = s.parameters();  // pointers kept for the unannounced writes below
        for (const auto& p : params) {
            for (std::size_t i = 0; i < p.size; ++i) p.data[i] = static_cast<T>(p.data[i] * T(0.75) + T(0.01));
        }
        s.parameters_changed();
        put_list(tag + "/predict_changed", s.predict(Xs));
        put_list(tag + "/predict_heads_changed", s.predict_heads(Xs, H));
        s.watch_parameter_writes();
        for (const auto& p : params) {
            for (std::size_t i = 0; i < p.size; ++i) p.data[i] = static_cast<T>(p.data[i] * T(1.25));
        }
        put_list(tag + "/predict_watched", s.predict(Xs));
        put_list(tag + "/predict_heads_watched", s.predict_heads(Xs, H));
    }
    for (int variant = 0; variant < 4; ++variant) {
        // 0: probabilities, 1: logits, 2: probabilities recomputed, 3: eval-mode forward
        scorer_config c = cfg;
        c.train_outputs = variant == 1 ? train_output::logits : train_output::probabilities;
        c.recompute_in_backward = variant == 2;
        const mode m = variant == 3 ? mode::eval : mode::train;
        const std::string v = tag + "/v" + std::to_string(variant);
        {
            biaffine_scorer<T> s(c);
            auto [Y, bp] = s.forward(Xs, m);
            put_list(v + "/forward", Y);
            const auto G = score_grads(Y);
            std::vector<score_view<const T>> gv;
            for (const auto& g : G) {
                const std::size_t n = g.shape()[0];
                gv.push_back(score_view<const T>{g.data(), n, o, static_cast<std::ptrdiff_t>(n * o)});
            }
            new_dx();
            bp(span<const score_view<const T>>(gv.data(), gv.size()),
               span<const seq_view<T>>(dx_slots.data(), dx_slots.size()));
            put_dx(v + "/backward");
            put_grads(v + "/backward", s);
        }
        {
            biaffine_scorer<T> s(c);
            auto [Y, bp] = s.forward_heads(Xs, H, m);
            put_list(v + "/forward_heads", Y);
            const auto G = score_grads(Y);
            std::vector<seq_view<const T>> gv;
            for (const auto& g : G) {
                gv.push_back(seq_view<const T>{g.data(), g.shape()[0], o, static_cast<std::ptrdiff_t>(o), 1});
            }
            new_dx();
            bp(span<const seq_view<const T>>(gv.data(), gv.size()),
               span<const seq_view<T>>(dx_slots.data(), dx_slots.size()));
            put_dx(v + "/backward_heads");
            put_grads(v + "/backward_heads", s);
        }
        // The pipelines: batcher over the scorer and over the padded layer.
        for (int padded = 0; padded < 2; ++padded) {
            const std::string p = v + (padded ? "/padded_pipe" : "/pipe");
            auto run = [&](auto&& pipe, biaffine_scorer<T>& s) {
                if (variant == 0) {
                    put_list(p + "/predict", pipe.predict(docs, lens));
                    put_list(p + "/predict_heads", pipe.predict_heads(docs, lens, heads));
                }
                {
                    auto [Y, bp] = pipe.forward(docs, lens, m);
                    put_list(p + "/forward", Y);
                    const auto G = score_grads(Y);
                    const auto gv = std::decay_t<decltype(pipe)>::grad_views(G);
                    const auto dX = bp(span<const score_view<const T>>(gv.data(), gv.size()));
                    for (std::size_t d = 0; d < dX.size(); ++d) put_array(p + "/dX" + std::to_string(d), dX[d]);
                    put_grads(p + "/backward", s);
                }
                s.zero_grad();
                {
                    auto [Y, bp] = pipe.forward_heads(docs, lens, heads, m);
                    put_list(p + "/forward_heads", Y);
                    const auto G = score_grads(Y);
                    const auto gv = std::decay_t<decltype(pipe)>::head_grad_views(G);
                    const auto dX = bp(span<const seq_view<const T>>(gv.data(), gv.size()));
                    for (std::size_t d = 0; d < dX.size(); ++d) put_array(p + "/hdX" + std::to_string(d), dX[d]);
                    put_grads(p + "/backward_heads", s);
                }
            };
            biaffine_scorer<T> s(c);
            batch_options opts;
            if (padded) {
                run(with_splits(with_minibatch_by_padded_size(with_pad_seq_unpad_matrix(s), budget::items(3), opts)), s);
            } else {
                run(with_splits(with_minibatch_by_padded_size(s, budget::items(3), opts)), s);
            }
        }
    }
}

template <class T>
void run_type(const std::string& name, compute_precision precision = compute_precision::fp32)
{
    for (std::size_t o : {std::size_t(1), std::size_t(3)}) {
        for (double drop : {0.0, 0.25}) {
            scorer_config cfg;
            cfg.n_in = 19;
            cfg.hidden = 13;
            cfg.labels = o;
            cfg.dropout = drop;
            cfg.seed = 11 + o;
            cfg.precision = precision;
            run_config<T>(name + "/o" + std::to_string(o) + (drop > 0 ? "/drop" : ""), cfg);
        }
    }
    // Wider: the kernels' blocked paths.
    scorer_config cfg;
    cfg.n_in = 70;
    cfg.hidden = 100;
    cfg.labels = 2;
    cfg.bias_u = false;
    cfg.seed = 5;
    cfg.precision = precision;
    run_config<T>(name + "/wide", cfg);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: dump_paths OUT.bin [OUT.idx]\n");
        return 2;
    }
    g_out.open(argv[1], std::ios::binary);
    if (argc > 2) g_idx.open(argv[2]);
    run_type<float>("float");
    run_type<double>("double");
    // bf16 inference and training (float scorers): the arithmetic
    // bf16_arithmetic() names, AMX, VDPBF16PS or emulated.
    run_type<float>("float/bf16", compute_precision::bf16);
    std::printf("%s: %llu bytes (backend float: %s, double: %s)\n", argv[1], static_cast<unsigned long long>(g_off),
                detail::compute_backend<float>::name, detail::compute_backend<double>::name);
    return 0;
}
