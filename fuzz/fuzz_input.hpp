// fuzz/fuzz_input.hpp - reading structured values out of a libFuzzer input.
//
// Every read consumes bytes from the front; past the end, reads return 0, so
// any input (even empty) decodes to something. Small values come from single
// bytes so that the fuzzer's mutations map to small, meaningful changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace fuzz {

class input {
public:
    input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

    bool empty() const noexcept { return pos_ >= size_; }

    std::uint8_t u8() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
    std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
    std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(u16()) | (static_cast<std::uint32_t>(u16()) << 16); }
    std::uint64_t u64() noexcept { return static_cast<std::uint64_t>(u32()) | (static_cast<std::uint64_t>(u32()) << 32); }
    bool flag() noexcept { return (u8() & 1) != 0; }

    /// A value in [lo, hi] from one byte (hi - lo < 256).
    std::size_t small(std::size_t lo, std::size_t hi) noexcept { return lo + u8() % (hi - lo + 1); }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

/// A property violation: print and abort, so libFuzzer saves the input.
[[noreturn]] inline void fail(const char* what, const char* file, int line)
{
    std::fprintf(stderr, "fuzz check failed at %s:%d: %s\n", file, line, what);
    std::abort();
}

}  // namespace fuzz

#define FUZZ_CHECK(cond)                                     \
    do {                                                     \
        if (!(cond)) ::fuzz::fail(#cond, __FILE__, __LINE__); \
    } while (0)
