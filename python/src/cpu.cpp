// python/src/cpu.cpp - the `biaffine._cpu` extension: which ISA extensions
// this CPU has and the OS enables, asked before an ISA variant of the
// extension is loaded (biaffine/_loader.py). Compiled for baseline x86-64
// (no ISA flags), so it runs on every CPU the loader must turn away.
#include <pybind11/pybind11.h>

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace py = pybind11;

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct regs {
    unsigned a = 0, b = 0, c = 0, d = 0;
};

regs cpuid(unsigned leaf, unsigned sub)
{
    regs r;
    if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) return regs{};
    return r;
}

// XCR0: which register states the OS saves on a context switch. Read with
// the instruction's bytes so no -mxsave is needed; only when OSXSAVE is set.
std::uint64_t xcr0()
{
    unsigned lo = 0, hi = 0;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned r, int i) { return ((r >> i) & 1u) != 0; }

// The features the variants need, named as in /proc/cpuinfo's flags, each
// true only when the OS also saves the registers it uses.
py::dict features()
{
    py::dict f;
    const regs l0 = cpuid(0, 0);
    const regs l1 = l0.a >= 1 ? cpuid(1, 0) : regs{};
    const regs l7 = l0.a >= 7 ? cpuid(7, 0) : regs{};
    const regs l71 = l0.a >= 7 && cpuid(7, 0).a >= 1 ? cpuid(7, 1) : regs{};
    const regs e1 = cpuid(0x80000000u, 0).a >= 0x80000001u ? cpuid(0x80000001u, 0) : regs{};
    const bool osxsave = bit(l1.c, 27);
    const std::uint64_t x = osxsave ? xcr0() : 0;
    // SSE and AVX state (XCR0 bits 1, 2); opmask, upper ZMM0-15, ZMM16-31 (5, 6, 7).
    const bool os_avx = (x & 0x6) == 0x6;
    const bool os_avx512 = os_avx && (x & 0xe0) == 0xe0;
    // AMX tile configuration and tile data (XCR0 bits 17, 18). Linux also
    // asks each process to request the tile data (arch_prctl), which the
    // library does where it uses them (amx_usable()).
    const bool os_amx = (x & 0x60000) == 0x60000;
    f["os_avx"] = os_avx;
    f["os_avx512"] = os_avx512;
    f["os_amx"] = os_amx;
    f["sse4_2"] = bit(l1.c, 20);
    f["popcnt"] = bit(l1.c, 23);
    f["movbe"] = bit(l1.c, 22);
    f["avx"] = os_avx && bit(l1.c, 28);
    f["fma"] = os_avx && bit(l1.c, 12);
    f["f16c"] = os_avx && bit(l1.c, 29);
    f["avx2"] = os_avx && bit(l7.b, 5);
    f["bmi1"] = bit(l7.b, 3);
    f["bmi2"] = bit(l7.b, 8);
    f["abm"] = bit(e1.c, 5);  // LZCNT
    f["avx512f"] = os_avx512 && bit(l7.b, 16);
    f["avx512dq"] = os_avx512 && bit(l7.b, 17);
    f["avx512cd"] = os_avx512 && bit(l7.b, 28);
    f["avx512bw"] = os_avx512 && bit(l7.b, 30);
    f["avx512vl"] = os_avx512 && bit(l7.b, 31);
    f["avx512_vnni"] = os_avx512 && bit(l7.c, 11);
    f["avx512_bf16"] = os_avx512 && bit(l71.a, 5);
    f["amx_bf16"] = os_amx && bit(l7.d, 22);
    f["amx_tile"] = os_amx && bit(l7.d, 24);
    return f;
}
#else
py::dict features() { return py::dict(); }
#endif

}  // namespace

PYBIND11_MODULE(_cpu, m)
{
    m.doc() = "biaffine._cpu: the CPU's ISA extensions, asked before an ISA variant is loaded";
    m.def("features", &features,
          "The ISA extensions this CPU has and the OS enables (cpuid, xgetbv), named as in /proc/cpuinfo; "
          "empty off x86.");
}
