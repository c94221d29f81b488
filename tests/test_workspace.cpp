// Tests for biaffine/workspace.hpp: carving from an open scope allocates
// nothing, the outermost scope frees its block, nested scopes share it, and
// scratch without a scope falls back to a tracked heap buffer.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <thread>

#include "biaffine/memory.hpp"
#include "biaffine/workspace.hpp"

using namespace biaffine;

TEST_CASE("scratch carved from an open scope does not allocate", "[workspace]")
{
    const memory_stats s0 = tracker().stats();
    {
        workspace_scope ws(4096);
        const memory_stats s1 = tracker().stats();
        CHECK(s1.current_bytes - s0.current_bytes == 4096);  // one block, 64-byte multiple
        CHECK(s1.allocations - s0.allocations == 1);
        {
            scratch<double> a(100);  // 800 -> 832 bytes carved
            scratch<float> b(3);     // 12 -> 64
            scratch<char> c(0);
            CHECK(a.size() == 100);
            CHECK(b.size() == 3);
            CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
            CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 64 == 0);
            // Distinct, non-overlapping regions.
            CHECK(reinterpret_cast<const char*>(b.data()) >= reinterpret_cast<const char*>(a.data() + 100));
            for (std::size_t i = 0; i < 100; ++i) a[i] = static_cast<double>(i);
            b[2] = 1.5f;
            CHECK(a[99] == 99.0);
            const memory_stats s2 = tracker().stats();
            CHECK(s2.current_bytes == s1.current_bytes);
            CHECK(s2.allocations == s1.allocations);
        }
        // Released scratch is reused: the same address comes back.
        const void* first = nullptr;
        {
            scratch<double> a(10);
            first = a.data();
        }
        {
            scratch<double> a(10);
            CHECK(static_cast<const void*>(a.data()) == first);
        }
        CHECK(tracker().stats().allocations == s1.allocations);
    }
    // The outermost scope frees the block.
    const memory_stats s3 = tracker().stats();
    CHECK(s3.current_bytes == s0.current_bytes);
    CHECK(s3.frees - s0.frees == 1);
}

TEST_CASE("nested scopes share one block; the outermost close frees it", "[workspace]")
{
    const std::uint64_t base = tracker().current_bytes();
    {
        workspace_scope outer(1000);  // rounded up to 1024
        CHECK(tracker().current_bytes() - base == 1024);
        {
            workspace_scope inner(512);  // fits: no new block
            CHECK(tracker().current_bytes() - base == 1024);
            scratch<char> a(512);
            CHECK(tracker().current_bytes() - base == 1024);
        }
        // Still open: the block survives the inner scope.
        CHECK(tracker().current_bytes() - base == 1024);
        {
            // Larger request while nothing is carved: the block is replaced
            // (freed first, so never two blocks at once).
            tracker().reset_peak();
            workspace_scope inner(8192);
            CHECK(tracker().current_bytes() - base == 8192);
            CHECK(tracker().peak_bytes() - base == 8192);
            {
                scratch<char> a(100);
                // Growing while something is carved would move live scratch: refused, the block stays.
                workspace_scope inner2(100000);
                CHECK(tracker().current_bytes() - base == 8192);
            }
        }
        CHECK(tracker().current_bytes() - base == 8192);
    }
    CHECK(tracker().current_bytes() == base);
}

TEST_CASE("scratch without a scope, or beyond the block, uses the tracked heap", "[workspace]")
{
    const memory_stats s0 = tracker().stats();
    {
        scratch<float> a(10);
        const memory_stats s1 = tracker().stats();
        CHECK(s1.current_bytes - s0.current_bytes == 40);  // exact element bytes, no rounding
        CHECK(s1.allocations - s0.allocations == 1);
        a[9] = 1.0f;
        CHECK(a[9] == 1.0f);
    }
    CHECK(tracker().current_bytes() == s0.current_bytes);
    {
        scratch<float> none(0);
        CHECK(tracker().stats().allocations == s0.allocations + 1);  // nothing for size 0
    }
    {
        workspace_scope ws(128);
        const std::uint64_t with_block = tracker().current_bytes();
        scratch<double> a(8);    // 64 bytes: carved
        CHECK(tracker().current_bytes() == with_block);
        scratch<double> b(100);  // 800 bytes: does not fit, heap
        CHECK(tracker().current_bytes() - with_block == 800);
        scratch<double> c(8);    // still fits in what is left
        CHECK(tracker().current_bytes() - with_block == 800);
    }
    CHECK(tracker().current_bytes() == s0.current_bytes);

    // Scopes are per thread: another thread's scratch does not see this one's block.
    workspace_scope ws(4096);
    std::uint64_t other_delta = 0;
    std::thread t([&] {
        const std::uint64_t b = tracker().current_bytes();
        scratch<double> x(16);
        other_delta = tracker().current_bytes() - b;
    });
    t.join();
    CHECK(other_delta == 128);
}
