// python/src/glibc_compat.cpp - linked into the wheel's extensions only
// (python/CMakeLists.txt, with libstdc++ linked in statically).
//
// libstdc++.a from GCC 12 on glibc 2.36 references arc4random@GLIBC_2.36
// (std::random_device, pulled in by the COW string instantiations even
// though nothing here uses it). That one symbol would raise the wheel's
// manylinux floor from glibc 2.34 (pthread_*, which every program linked
// on 2.34 or later names) to 2.36. A definition here, hidden inside the
// module, satisfies the reference instead, with getrandom (glibc 2.25).
#include <sys/random.h>

extern "C" __attribute__((visibility("hidden"))) unsigned int arc4random() noexcept
{
    unsigned int v = 0;
    while (getrandom(&v, sizeof v, 0) != static_cast<long>(sizeof v)) {
    }
    return v;
}
