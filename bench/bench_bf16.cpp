// bench/bench_bf16.cpp - the measurement behind issue 40's library-or-kernel
// choices: oneDNN's bf16 matmul (bf16 x bf16 -> fp32 accumulation, fp32 or
// bf16 output) against its own fp32 matmul and the project's fp32 kernels,
// on the scorer's shapes, in one run:
//
//   proj      X [N, 256] . W^T [256, 128] + bias, ReLU (post-op / epilogue),
//             N = 100k and 20k tokens: the projections. Also ours_bf16, the
//             VDPBF16PS kernel of avx512_bf16_gemm.hpp (fp32 and bf16 out).
//   uw        U [N, 129] . W' [129, o 129], o = 1 at N = 100k, o = 50 at
//             N = 20k: the label-wise product.
//   split     per-split S = V . T^T, V [n, 129], T [n o, 129], every split of
//             n consecutive tokens of 100k (o = 1) or 20k (o = 50), n = 5 to
//             100: fp32 zmm_dots, bf16_dots (VDPBF16PS) on rows packed once,
//             oneDNN's bf16 matmul called per split.
//   pipeline  a batch's forward up to the split scores, fp32 (our kernels)
//             against bf16 (oneDNN writing the pair layout, bf16_dots).
//   backward  the training step's batch-wide backward products, as C [rows,
//             M] = A [rows, K] . B [K, M] in the same harness: the weight
//             gradients (A = dH^T or U^T, K = the N tokens) and the input
//             gradients (K = h or o hv): what a bf16 training step would put
//             on these kernels (issue 40 item 4).
//
// Weights are packed once outside the timing (ours: gemm_pack_b; oneDNN: a
// reorder into the layout its primitive asks for), as the scorer would keep
// them between batches; activations in bf16 are converted inside the timing
// where a row says "+cvt" (the once-per-batch pack a bf16 mode pays). Each
// implementation runs once per round, alternated, `--reps` rounds; the best
// process CPU time counts (1 thread: steadier than wall time on a shared
// machine). GFLOP/s count 2 N K M with the logical depth (129, not 130).
//
// Built only with -DBIAFFINE_WITH_ONEDNN=ON (libdnnl-dev) on a target with
// AVX512_BF16 and the AVX2/FMA kernel. Run:
//   build/bench/bench_bf16 [--reps 5] [--threads 1] [--only proj|uw|split|pipeline|backward]
#include "common.hpp"

#include <biaffine/bfloat16.hpp>
#include <biaffine/detail/compute/amx_bf16_gemm.hpp>
#include <biaffine/detail/compute/avx2_kernel.hpp>
#include <biaffine/detail/compute/avx512_bf16.hpp>
#include <biaffine/detail/compute/avx512_bf16_gemm.hpp>
#include <biaffine/detail/compute/avx512_small.hpp>
#include <biaffine/detail/compute/bf16_emulated.hpp>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#if !BIAFFINE_DETAIL_ZMM_BF16 || !defined(__AVX2__) || !defined(__FMA__)
#error "bench_bf16 needs a build for AVX512_BF16 (e.g. -march=native on Zen 4, -march=sapphirerapids)"
#endif

namespace {

using biaffine::bfloat16;
using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
namespace bd = biaffine::detail;

std::vector<float> random_floats(std::size_t n, unsigned seed)
{
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen);
    return v;
}

struct impl {
    std::string name;
    std::function<void()> run;
    double best = 1e30;
};

// Runs every implementation once per round, `reps` rounds, and prints one
// row each: best CPU ms, GFLOP/s, ratio to the first row.
void run_case(const std::string& label, double flops, std::vector<impl>& impls, int reps)
{
    for (auto& i : impls) i.run();  // warm-up: first touch, primitive caches
    for (int r = 0; r < reps; ++r)
        for (auto& i : impls) {
            const double t0 = biaffine_bench::cpu_seconds();
            i.run();
            i.best = std::min(i.best, biaffine_bench::cpu_seconds() - t0);
        }
    for (const auto& i : impls)
        std::printf("%-28s %-24s %10.3f ms %8.1f GFLOP/s  x%.2f\n", label.c_str(), i.name.c_str(), 1e3 * i.best,
                    flops / i.best * 1e-9, impls.front().best / i.best);
    std::fflush(stdout);
}

// oneDNN's matmul C [M, N] = A [M, K] . B [K, N] (+ bias, ReLU), B given
// row-major as [N, K] (W, or W'^T) and reordered once into the layout the
// primitive asks for.
struct dnnl_matmul {
    dnnl::engine& eng;
    dnnl::stream& strm;
    dnnl::matmul prim;
    memory a, b, bias, c;

    dnnl_matmul(dnnl::engine& e, dnnl::stream& s, memory::dim M, memory::dim K, memory::dim N, dt in, dt out,
                bool with_bias, bool relu, void* a_data, memory::dim lda, const float* b_f32_nk, const float* bias_data,
                void* c_data, memory::dim ldc = 0)
        : eng(e), strm(s)
    {
        const memory::desc a_md({M, K}, in, memory::dims{lda, 1}), b_any({K, N}, in, tag::any),
            c_md({M, N}, out, memory::dims{ldc ? ldc : N, 1});
        const memory::desc bias_md({1, N}, dt::f32, tag::ab);
        dnnl::primitive_attr attr;
        if (relu) {
            dnnl::post_ops po;
            po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
            attr.set_post_ops(po);
        }
        const auto desc = with_bias ? dnnl::matmul::desc(a_md, b_any, bias_md, c_md) : dnnl::matmul::desc(a_md, b_any, c_md);
        const dnnl::matmul::primitive_desc pd(desc, attr, eng);
        prim = dnnl::matmul(pd);
        a = memory(a_md, eng, a_data);
        c = memory(c_md, eng, c_data);
        if (with_bias) bias = memory(bias_md, eng, const_cast<float*>(bias_data));
        // B from f32 [N, K] row-major (= [K, N] in tag ba) to the primitive's
        // type and layout, once.
        memory b_user({{K, N}, dt::f32, tag::ba}, eng, const_cast<float*>(b_f32_nk));
        b = memory(pd.weights_desc(), eng);
        dnnl::reorder(b_user, b).execute(strm, b_user, b);
        strm.wait();
        std::printf("  oneDNN %s matmul [%lld x %lld] x [%lld x %lld] -> %s: %s\n", in == dt::bf16 ? "bf16" : "f32",
                    static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(K),
                    static_cast<long long>(N), out == dt::bf16 ? "bf16" : "f32", pd.impl_info_str());
    }
    void operator()()
    {
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
        if (bias) args.insert({DNNL_ARG_BIAS, bias});
        prim.execute(strm, args);
        strm.wait();
    }
};

// A big product C [N, M] = act(X [N, K] . W^T + bias): ours fp32, oneDNN
// f32, oneDNN bf16 (fp32 and bf16 outputs), bf16 with X's conversion.
void big_product(dnnl::engine& eng, dnnl::stream& strm, const std::string& label, std::size_t N, std::size_t K,
                 std::size_t M, bool bias_relu, int reps)
{
    const auto x = random_floats(N * K, 1), w = random_floats(M * K, 2), bias = random_floats(M, 3);
    // X in bf16 with rows of an even count (pack_bf16_rows' layout).
    const std::size_t kp = K + K % 2;
    std::vector<bfloat16> xb(N * kp);
    bd::pack_bf16_rows(x.data(), static_cast<std::ptrdiff_t>(K), static_cast<std::ptrdiff_t>(N),
                       static_cast<std::ptrdiff_t>(K), xb.data(), static_cast<std::ptrdiff_t>(kp));
    std::vector<float> c(N * M), c2(N * M);
    std::vector<bfloat16> cb(N * M);
    std::vector<float> packed(bd::gemm_packed_size(K, M));
    bd::gemm_pack_b(w.data(), 1, static_cast<std::ptrdiff_t>(K), K, M, packed.data());  // W^T: (k, m) at w[m K + k]
    std::vector<bfloat16> packed16(bd::bf16_gemm_packed_size(K, M));
    bd::bf16_gemm_pack_b(w.data(), 1, static_cast<std::ptrdiff_t>(K), K, M, packed16.data());
#if BIAFFINE_DETAIL_AMX_BF16
    // AMX: rows and panels padded to a depth of 32, rows readable past N.
    const std::size_t ka = bd::amx_depth(K);
    std::vector<bfloat16> xa((N + bd::amx_row_slack) * ka, bfloat16(0.0f));
    for (std::size_t i = 0; i < N; ++i) std::copy(xb.begin() + i * kp, xb.begin() + i * kp + K, xa.begin() + i * ka);
    std::vector<bfloat16> packed_amx(bd::bf16_gemm_packed_size(K, M, ka));
    bd::bf16_gemm_pack_b(w.data(), 1, static_cast<std::ptrdiff_t>(K), K, M, packed_amx.data(), ka);
    if (!bd::amx_usable()) std::printf("  (Linux withholds the AMX tiles: the ours_amx rows are skipped)\n");
#endif
    bd::bf16_gemm_epilogue ep16;
    ep16.bias = bias_relu ? bias.data() : nullptr;
    ep16.relu = bias_relu;
    const auto Ml = static_cast<memory::dim>(M), Kl = static_cast<memory::dim>(K), Nl = static_cast<memory::dim>(N),
               kpl = static_cast<memory::dim>(kp);
    dnnl_matmul f32(eng, strm, Nl, Kl, Ml, dt::f32, dt::f32, bias_relu, bias_relu, const_cast<float*>(x.data()), Kl, w.data(),
                    bias.data(), c2.data());
    dnnl_matmul b16(eng, strm, Nl, Kl, Ml, dt::bf16, dt::f32, bias_relu, bias_relu, xb.data(), kpl, w.data(), bias.data(),
                    c2.data());
    dnnl_matmul b16o(eng, strm, Nl, Kl, Ml, dt::bf16, dt::bf16, bias_relu, bias_relu, xb.data(), kpl, w.data(), bias.data(),
                     cb.data());
    // An odd K also as its even padding (the packed rows' zero; W's rows
    // padded with a zero too): oneDNN's bf16 brgemm takes K in pairs.
    std::vector<float> wp(M * kp, 0.0f);
    for (std::size_t j = 0; j < M; ++j) std::copy(w.begin() + j * K, w.begin() + (j + 1) * K, wp.begin() + j * kp);
    dnnl_matmul b16p(eng, strm, Nl, kpl, Ml, dt::bf16, dt::f32, bias_relu, bias_relu, xb.data(), kpl, wp.data(),
                     bias.data(), c2.data());
    dnnl_matmul b16po(eng, strm, Nl, kpl, Ml, dt::bf16, dt::bf16, bias_relu, bias_relu, xb.data(), kpl, wp.data(),
                      bias.data(), cb.data());
    std::vector<impl> impls{
        {"ours_fp32 (avx2_kernel)",
         [&] {
             bd::gemm_bias_relu(x.data(), static_cast<std::ptrdiff_t>(K), N, K, packed.data(), M,
                                bias_relu ? bias.data() : nullptr, bias_relu, c.data(), static_cast<std::ptrdiff_t>(M));
         }},
        {"onednn_f32", [&] { f32(); }},
        {"ours_bf16 ->f32",
         [&] {
             bd::bf16_gemm(xb.data(), static_cast<std::ptrdiff_t>(kp), N, K, packed16.data(), M, ep16, c.data(),
                           static_cast<std::ptrdiff_t>(M));
         }},
        {"ours_bf16 ->bf16",
         [&] {
             bd::bf16_gemm(xb.data(), static_cast<std::ptrdiff_t>(kp), N, K, packed16.data(), M, ep16, nullptr, 0,
                           cb.data(), static_cast<std::ptrdiff_t>(M));
         }},
        {"onednn_bf16 ->f32", [&] { b16(); }},
        {"onednn_bf16 ->bf16", [&] { b16o(); }},
        {"onednn_bf16 K even ->f32", [&] { b16p(); }},
        {"onednn_bf16 K even ->bf16", [&] { b16po(); }},
        {"onednn_bf16 ->f32 +cvt",
         [&] {
             bd::pack_bf16_rows(x.data(), static_cast<std::ptrdiff_t>(K), static_cast<std::ptrdiff_t>(N),
                                static_cast<std::ptrdiff_t>(K), xb.data(), static_cast<std::ptrdiff_t>(kp));
             b16();
         }},
        {"cvt X only (ms; pack_bf16_rows)",
         [&] {
             bd::pack_bf16_rows(x.data(), static_cast<std::ptrdiff_t>(K), static_cast<std::ptrdiff_t>(N),
                                static_cast<std::ptrdiff_t>(K), xb.data(), static_cast<std::ptrdiff_t>(kp));
         }},
    };
#if BIAFFINE_DETAIL_AMX_BF16
    if (bd::amx_usable()) {
        impls.push_back({"ours_amx ->f32", [&] {
                             bd::amx_gemm(xa.data(), static_cast<std::ptrdiff_t>(ka), N, K, packed_amx.data(), M, ep16,
                                          false, c.data(), static_cast<std::ptrdiff_t>(M));
                         }});
        impls.push_back({"ours_amx ->bf16", [&] {
                             bd::amx_gemm(xa.data(), static_cast<std::ptrdiff_t>(ka), N, K, packed_amx.data(), M, ep16,
                                          false, nullptr, 0, cb.data(), static_cast<std::ptrdiff_t>(M));
                         }});
    }
#endif
    run_case(label, 2.0 * double(N) * double(K) * double(M), impls, reps);
}

// Every split of n consecutive rows of V [N, k] against its n o rows of
// T [N o, k]: S [n, n o] = V_s . T_s^T.
void per_split(dnnl::engine& eng, dnnl::stream& strm, std::size_t N, std::size_t o, std::size_t n, int reps)
{
    const std::size_t k = 129, kp = 130, splits = N / n, m = n * o;
    const auto v = random_floats(splits * n * k, 4), t = random_floats(splits * m * k, 5);
    std::vector<bfloat16> vb(splits * n * kp), tb(splits * m * kp);
    const auto pack = [&] {
        bd::pack_bf16_rows(v.data(), k, static_cast<std::ptrdiff_t>(splits * n), k, vb.data(), kp);
        bd::pack_bf16_rows(t.data(), k, static_cast<std::ptrdiff_t>(splits * m), k, tb.data(), kp);
    };
    pack();
    std::vector<float> ve(v.size()), te(t.size());
    std::vector<float> s(n * m);
    const auto nl = static_cast<memory::dim>(n), ml = static_cast<memory::dim>(m);
    // oneDNN per split: user layouts (V ab, T^T as ba), data handles moved
    // per split.
    const memory::desc a_md({nl, 130}, dt::bf16, tag::ab), b_md({130, ml}, dt::bf16, tag::ba), c_md({nl, ml}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    dnnl::matmul prim(pd);
    memory am(a_md, eng, vb.data()), bm(b_md, eng, tb.data()), cm(c_md, eng, s.data());
    static bool said = false;
    if (!said) std::printf("  oneDNN bf16 per-split matmul: %s\n", pd.impl_info_str()), said = true;
    std::vector<impl> impls{
        {"ours_fp32 (zmm_dots)",
         [&] {
             for (std::size_t i = 0; i < splits; ++i)
                 bd::zmm_dots(v.data() + i * n * k, k, static_cast<std::ptrdiff_t>(n), t.data() + i * m * k, k,
                              static_cast<std::ptrdiff_t>(m), k, s.data(), static_cast<std::ptrdiff_t>(m));
         }},
        {"ours_bf16 (bf16_dots)",
         [&] {
             for (std::size_t i = 0; i < splits; ++i)
                 bd::bf16_dots(vb.data() + i * n * kp, kp, static_cast<std::ptrdiff_t>(n), tb.data() + i * m * kp, kp,
                               static_cast<std::ptrdiff_t>(m), k, s.data(), static_cast<std::ptrdiff_t>(m));
         }},
        {"ours_bf16 +cvt",
         [&] {
             pack();
             for (std::size_t i = 0; i < splits; ++i)
                 bd::bf16_dots(vb.data() + i * n * kp, kp, static_cast<std::ptrdiff_t>(n), tb.data() + i * m * kp, kp,
                               static_cast<std::ptrdiff_t>(m), k, s.data(), static_cast<std::ptrdiff_t>(m));
         }},
        {"emulated +round (zmm_dots)",
         [&] {
             bd::round_rows_to_bfloat16(v.data(), k, static_cast<std::ptrdiff_t>(splits * n), k, ve.data(), k);
             bd::round_rows_to_bfloat16(t.data(), k, static_cast<std::ptrdiff_t>(splits * m), k, te.data(), k);
             for (std::size_t i = 0; i < splits; ++i)
                 bd::bf16_dots_emulated(ve.data() + i * n * k, k, static_cast<std::ptrdiff_t>(n), te.data() + i * m * k,
                                        k, static_cast<std::ptrdiff_t>(m), k, s.data(), static_cast<std::ptrdiff_t>(m));
         }},
        {"onednn_bf16 per split",
         [&] {
             for (std::size_t i = 0; i < splits; ++i) {
                 am.set_data_handle(vb.data() + i * n * kp);
                 bm.set_data_handle(tb.data() + i * m * kp);
                 prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
             }
             strm.wait();
         }},
    };
    run_case("split N=" + std::to_string(N) + " o=" + std::to_string(o) + " n=" + std::to_string(n),
             2.0 * double(splits) * double(n) * double(m) * double(k), impls, reps);
}


// The forward of one batch end to end at one label set: both projections
// (bias, ReLU) into rows of h + 1 with a column of ones, T = U . W', every
// split's S = V . T^T. fp32: our kernels. bf16: X converted once, oneDNN's
// bf16 matmul writing bf16 rows of 130 (the pair layout bf16_dots reads:
// the ones column and a zero column preset; W' padded with zero columns so
// that every label's row of T ends in a zero), bf16_dots per split. The
// ratio is what a bf16 forward could gain before softmax and outputs.
void pipeline(dnnl::engine& eng, dnnl::stream& strm, std::size_t N, std::size_t o, std::size_t n, int reps)
{
    const std::size_t nin = 256, h = 128, k = h + 1, kp = k + 1, splits = N / n;
    const auto x = random_floats(N * nin, 6), wh = random_floats(h * nin, 7), wd = random_floats(h * nin, 8),
               bh = random_floats(h, 9), bdep = random_floats(h, 10), wl = random_floats(o * k * k, 11);
    // fp32: H, D [N, k] (last column 1), T [N, o k].
    std::vector<float> H(N * k, 1.0f), D(N * k, 1.0f), T(N * o * k), S(n * n * o);
    std::vector<float> ph(bd::gemm_packed_size(nin, h)), pdp(bd::gemm_packed_size(nin, h)),
        pl(bd::gemm_packed_size(k, o * k));
    bd::gemm_pack_b(wh.data(), 1, static_cast<std::ptrdiff_t>(nin), nin, h, ph.data());
    bd::gemm_pack_b(wd.data(), 1, static_cast<std::ptrdiff_t>(nin), nin, h, pdp.data());
    bd::gemm_pack_b(wl.data(), 1, static_cast<std::ptrdiff_t>(k), k, o * k, pl.data());  // W'^T rows [o k, k]
    // bf16: Xb [N, 256], Hb, Db [N, kp] (ones, then zero), Tb [N, o kp].
    std::vector<bfloat16> xb(N * nin), Hb(N * kp), Db(N * kp), Tb(N * o * kp);
    for (std::size_t i = 0; i < N; ++i) {
        Hb[i * kp + h] = Db[i * kp + h] = bfloat16(1.0f);
        Hb[i * kp + k] = Db[i * kp + k] = bfloat16(0.0f);
    }
    std::vector<float> wlp(o * kp * kp, 0.0f);  // [o kp, kp]: label l's column j < k from wl, the rest zero
    for (std::size_t r = 0; r < o * k; ++r)
        std::copy(wl.begin() + r * k, wl.begin() + (r + 1) * k, wlp.begin() + (r / k * kp + r % k) * kp);
    const auto L = [](std::size_t v) { return static_cast<memory::dim>(v); };
    dnnl_matmul mh(eng, strm, L(N), L(nin), L(h), dt::bf16, dt::bf16, true, true, xb.data(), L(nin), wh.data(), bh.data(),
                   Hb.data(), L(kp));
    dnnl_matmul md(eng, strm, L(N), L(nin), L(h), dt::bf16, dt::bf16, true, true, xb.data(), L(nin), wd.data(),
                   bdep.data(), Db.data(), L(kp));
    dnnl_matmul ml(eng, strm, L(N), L(kp), L(o * kp), dt::bf16, dt::bf16, false, false, Hb.data(), L(kp), wlp.data(),
                   nullptr, Tb.data());
    const auto P = [](std::size_t v) { return static_cast<std::ptrdiff_t>(v); };
    std::vector<impl> impls{
        {"fp32: kernel, zmm_dots",
         [&] {
             bd::gemm_bias_relu(x.data(), P(nin), N, nin, ph.data(), h, bh.data(), true, H.data(), P(k));
             bd::gemm_bias_relu(x.data(), P(nin), N, nin, pdp.data(), h, bdep.data(), true, D.data(), P(k));
             bd::gemm_packed(H.data(), P(k), N, k, pl.data(), o * k, {}, T.data(), P(o * k));
             for (std::size_t i = 0; i < splits; ++i)
                 bd::zmm_dots(D.data() + i * n * k, P(k), P(n), T.data() + i * n * o * k, P(k), P(n * o), P(k), S.data(),
                              P(n * o));
         }},
        {"bf16: cvt, oneDNN, bf16_dots",
         [&] {
             bd::pack_bf16_rows(x.data(), P(nin), P(N), P(nin), xb.data(), P(nin));
             mh();
             md();
             ml();
             for (std::size_t i = 0; i < splits; ++i)
                 bd::bf16_dots(Db.data() + i * n * kp, P(kp), P(n), Tb.data() + i * n * o * kp, P(kp), P(n * o), P(k),
                               S.data(), P(n * o));
         }},
    };
    // Both write the last split's scores to S: bf16's may differ from
    // fp32's by bf16's rounding of the operands (8 significant bits), not more.
    impls[0].run();
    const std::vector<float> s32 = S;
    impls[1].run();
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < S.size(); ++i) {
        diff = std::max(diff, std::fabs(double(S[i]) - double(s32[i])));
        scale = std::max(scale, std::fabs(double(s32[i])));
    }
    std::printf("  pipeline N=%zu o=%zu: last split's scores, max |bf16 - fp32| / max |fp32| = %.2e\n", N, o,
                diff / scale);
    const double flops = 2.0 * double(N) * (2.0 * double(nin) * double(h) + double(k) * double(o * k)) +
                         2.0 * double(splits) * double(n) * double(n * o) * double(k);
    run_case("pipeline N=" + std::to_string(N) + " o=" + std::to_string(o) + " n=" + std::to_string(n), flops, impls,
             reps);
}

}  // namespace

int main(int argc, char** argv)
{
    int reps = 5, threads = 1;
    std::string only;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string f = argv[i];
        if (f == "--reps") reps = std::stoi(argv[i + 1]);
        else if (f == "--threads") threads = std::stoi(argv[i + 1]);
        else if (f == "--only") only = argv[i + 1];
        else {
            std::fprintf(stderr, "bench_bf16: unknown flag %s (--reps N, --threads N, --only proj|uw|split|pipeline|backward)\n", f.c_str());
            return 2;
        }
    }
    omp_set_num_threads(threads);
    const dnnl_version_t* ver = dnnl_version();
    std::printf("bench_bf16: oneDNN %d.%d.%d, %d thread(s), best of %d rounds (process CPU time), ABI %s\n", ver->major,
                ver->minor, ver->patch, threads, reps, biaffine::abi_tag);
    const auto load = [] {
        std::ifstream f("/proc/loadavg");
        std::string l1, l5;
        f >> l1 >> l5;
        return l1 + " " + l5;
    };
    std::printf("load average (1, 5 min) at start: %s\n", load().c_str());
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    if (only.empty() || only == "proj") {
        big_product(eng, strm, "proj N=100000 256x128", 100000, 256, 128, true, reps);
        big_product(eng, strm, "proj N=20000 256x128", 20000, 256, 128, true, reps);
    }
    if (only.empty() || only == "uw") {
        big_product(eng, strm, "uw N=100000 o=1 129x129", 100000, 129, 129, false, reps);
        big_product(eng, strm, "uw N=20000 o=50 129x6450", 20000, 129, 6450, false, reps);
    }
    if (only.empty() || only == "split") {
        for (std::size_t n : {5, 10, 20, 30, 50, 100}) per_split(eng, strm, 100000, 1, n, reps);
        for (std::size_t n : {5, 10, 20, 50}) per_split(eng, strm, 20000, 50, n, reps);
    }
    if (only.empty() || only == "pipeline") {
        pipeline(eng, strm, 100000, 1, 20, reps);
        pipeline(eng, strm, 20000, 50, 20, reps);
    }
    if (only.empty() || only == "backward") {
        // Projections' backward at N = 100k: dW [h, n_in] = dH^T X, dX = dH W.
        big_product(eng, strm, "bwd dW_proj = dH^T [128, N=100000] . X [N, 256]", 128, 100000, 256, false, reps);
        big_product(eng, strm, "bwd dX = dH [N=100000, 128] . W [128, 256]", 100000, 128, 256, false, reps);
        // U W' backward: dW' = U^T dT, dU = dT W'^T; o = 1 at 100k, o = 50 at 20k.
        big_product(eng, strm, "bwd dW_bilinear = U^T [129, N=100000] . dT [N, 129]", 129, 100000, 129, false, reps);
        big_product(eng, strm, "bwd dW_bilinear = U^T [129, N=20000] . dT [N, 6450]", 129, 20000, 6450, false, reps);
        big_product(eng, strm, "bwd dU = dT [N=20000, 6450] . W' [6450, 129]", 20000, 6450, 129, false, reps);
    }
    std::printf("load average (1, 5 min) at end: %s\n", load().c_str());
}
