// fuzz/fuzz_lazy_split.cpp - lazy splitting and length capping on arbitrary scores.
//
// lazy_split: lengths sum to n, each in [1, max_length], and equal a naive
// recursive re-implementation of the rule (cut a piece longer than max before
// its highest-scoring token other than its first; ties: earliest); a NaN score
// anywhere throws biaffine::error.
// cap_split_lengths: sums preserved sentence by sentence, zero-length
// sentences kept, every piece within max; without scores the fewest and most
// equal pieces, longer first; with scores exactly lazy_split per sentence.
// Bad arguments (max_length 0, scores of the wrong size, a NaN score) throw
// the documented errors.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "biaffine/lazy_split.hpp"
#include "fuzz_input.hpp"

using namespace biaffine;

namespace {

template <class T>
T score_of(fuzz::input& in)
{
    const std::uint8_t b = in.u8();
    if constexpr (std::is_floating_point_v<T>) {
        switch (b) {
        case 255: return std::numeric_limits<T>::quiet_NaN();
        case 254: return std::numeric_limits<T>::infinity();
        case 253: return -std::numeric_limits<T>::infinity();
        default: break;
        }
        return static_cast<T>(b % 16) / T(4);  // few distinct values: many ties
    } else {
        return static_cast<T>(b % 16);
    }
}

template <class T>
bool has_nan(const std::vector<T>& s)
{
    if constexpr (std::is_floating_point_v<T>) {
        return std::any_of(s.begin(), s.end(), [](T x) { return std::isnan(x); });
    } else {
        return false;
    }
}

// True when f() throws biaffine::error that is none of its subclasses.
template <class F>
bool throws_plain_error(F&& f)
{
    try {
        f();
    } catch (const length_error&) {
        return false;
    } catch (const shape_error&) {
        return false;
    } catch (const error&) {
        return true;
    }
    return false;
}

template <class T>
bool less(T a, T b)  // NaN below everything, NaNs tie
{
    if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return !std::isnan(b);
        if (std::isnan(b)) return false;
    }
    return a < b;
}

template <class T>
void naive(const std::vector<T>& s, std::size_t b, std::size_t e, std::size_t max, std::vector<std::size_t>& out)
{
    if (e - b <= max) {
        out.push_back(e - b);
        return;
    }
    std::size_t best = b + 1;
    for (std::size_t i = b + 2; i < e; ++i) {
        if (less(s[best], s[i])) best = i;
    }
    naive(s, b, best, max, out);
    naive(s, best, e, max, out);
}

template <class T>
void fuzz_lazy(fuzz::input& in)
{
    const std::size_t n = in.u8() % 4 == 0 ? in.u16() % 2000 : in.u8();
    const std::size_t max = in.u8() % 32;
    std::vector<T> scores(n);
    for (auto& x : scores) x = score_of<T>(in);
    if (max == 0) {
        bool threw = false;
        try {
            lazy_split(scores, 0);
        } catch (const length_error&) {
            threw = true;
        }
        FUZZ_CHECK(threw);
        return;
    }
    if (has_nan(scores)) {
        FUZZ_CHECK(throws_plain_error([&] { lazy_split(scores, max); }));
        FUZZ_CHECK(throws_plain_error([&] { lazy_split(scores.data(), n, max); }));
        return;
    }
    const std::vector<std::size_t> got = lazy_split(scores, max);
    std::size_t sum = 0;
    for (std::size_t l : got) {
        FUZZ_CHECK(l >= 1 && l <= max);
        sum += l;
    }
    FUZZ_CHECK(sum == n);
    FUZZ_CHECK(got == lazy_split(scores.data(), n, max));  // both overloads agree
    if (n <= 400) {
        std::vector<std::size_t> ref;
        if (n != 0) naive(scores, 0, n, max, ref);
        FUZZ_CHECK(got == ref);
    }
}

template <class T>
void fuzz_cap(fuzz::input& in)
{
    std::vector<std::size_t> lengths(in.u8() % 16);
    for (auto& l : lengths) l = in.u8() % 4 == 0 ? 0 : in.u8() % 40;
    const std::size_t max = in.u8() % 12;
    const int with_scores = in.u8() % 3;  // 0 none, 1 right size, 2 wrong size
    std::size_t total = 0;
    for (std::size_t l : lengths) total += l;
    std::vector<T> scores(with_scores == 2 ? total + 1 + in.u8() % 3 : total);
    for (auto& x : scores) x = score_of<T>(in);
    if (with_scores == 2 && in.flag() && total > 0) scores.resize(total - 1);
    if (max == 0) {
        bool threw = false;
        try {
            if (with_scores == 0) cap_split_lengths(lengths, 0);
            else cap_split_lengths(lengths, 0, scores);
        } catch (const length_error&) {
            threw = true;
        } catch (const shape_error&) {
            threw = with_scores == 2;  // two things wrong: either may be reported
        }
        FUZZ_CHECK(threw);
        return;
    }
    if (with_scores == 2) {
        bool threw = false;
        try {
            cap_split_lengths(lengths, max, scores);
        } catch (const shape_error&) {
            threw = true;
        }
        FUZZ_CHECK(threw);
        return;
    }
    if (with_scores == 1 && has_nan(scores)) {
        FUZZ_CHECK(throws_plain_error([&] { cap_split_lengths(lengths, max, scores); }));
        return;
    }
    const std::vector<std::size_t> got =
        with_scores == 0 ? cap_split_lengths(lengths, max) : cap_split_lengths(lengths, max, scores);
    // Walk the pieces sentence by sentence.
    std::size_t at = 0, offset = 0;
    for (std::size_t len : lengths) {
        if (len <= max) {
            FUZZ_CHECK(at < got.size() && got[at] == len);
            ++at;
        } else if (with_scores == 0) {
            const std::size_t pieces = (len + max - 1) / max;
            FUZZ_CHECK(at + pieces <= got.size());
            std::size_t sum = 0;
            for (std::size_t p = 0; p < pieces; ++p) {
                const std::size_t v = got[at + p];
                FUZZ_CHECK(v >= 1 && v <= max);
                FUZZ_CHECK(v == len / pieces || v == len / pieces + 1);
                if (p > 0) FUZZ_CHECK(got[at + p - 1] >= v);  // longer first
                sum += v;
            }
            FUZZ_CHECK(sum == len);
            at += pieces;
        } else {
            const std::vector<T> sentence(scores.begin() + static_cast<std::ptrdiff_t>(offset),
                                          scores.begin() + static_cast<std::ptrdiff_t>(offset + len));
            const std::vector<std::size_t> want = lazy_split(sentence, max);
            FUZZ_CHECK(at + want.size() <= got.size());
            FUZZ_CHECK(std::equal(want.begin(), want.end(), got.begin() + static_cast<std::ptrdiff_t>(at)));
            at += want.size();
        }
        offset += len;
    }
    FUZZ_CHECK(at == got.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    switch (in.u8() % 6) {
    case 0: fuzz_lazy<float>(in); break;
    case 1: fuzz_lazy<double>(in); break;
    case 2: fuzz_lazy<int>(in); break;
    case 3: fuzz_cap<float>(in); break;
    case 4: fuzz_cap<double>(in); break;
    default: fuzz_cap<int>(in); break;
    }
    return 0;
}
