// fuzz_npy - load_npy over arbitrary weight files.
//
// The input's first byte picks which of the scorer's five .npy files it
// replaces (the other four are valid files written once per process); the
// rest is that file's bytes. Properties: load_npy either succeeds, with every
// parameter equal to what the files hold (the fuzzed file's data decoded
// independently), or throws a biaffine::error and leaves every
// parameter bitwise as it was. Any other exception, a crash or a sanitizer
// report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <biaffine/biaffine.hpp>

#include "fuzz_input.hpp"

namespace {

biaffine::scorer_config config()
{
    biaffine::scorer_config c;
    c.n_in = 3;
    c.hidden = 2;
    c.labels = 2;
    c.seed = 1;
    return c;
}

const std::string& dir()
{
    static const std::string d = [] {
        const auto p = std::filesystem::temp_directory_path() / ("biaffine_fuzz_npy_" + std::to_string(::getpid()));
        std::filesystem::create_directories(p);
        biaffine::biaffine_scorer<float> s(config());
        biaffine::save_npy(s, p.string());
        return p.string();
    }();
    return d;
}

std::vector<std::vector<unsigned char>> snapshot(biaffine::biaffine_scorer<double>& s)
{
    std::vector<std::vector<unsigned char>> out;
    for (const auto& p : s.parameters()) {
        const auto* b = reinterpret_cast<const unsigned char*>(p.data);
        out.emplace_back(b, b + p.size * sizeof(double));
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static const char* names[] = {"head_weight", "head_bias", "dependent_weight", "dependent_bias", "bilinear_weight"};
    const std::string& d = dir();
    fuzz::input in(data, size);
    const std::size_t which = in.u8() % 5;
    const std::string path = d + "/" + names[which] + ".npy";
    const std::string keep = [&] {
        std::ifstream f(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }();
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        if (size > 1) f.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
    }
    biaffine::scorer_config c = config();
    c.seed = 77;
    biaffine::biaffine_scorer<double> s(c);
    const auto before = snapshot(s);
    bool ok = true;
    try {
        biaffine::load_npy(s, d);
    } catch (const biaffine::error&) {
        ok = false;
    }
    if (ok) {
        FUZZ_CHECK(snapshot(s) != before);
        // A file load_npy accepted is its header then exactly size x item
        // bytes of little-endian float32 or float64 data (the size is what it
        // checks): the fuzzed parameter equals the file's last bytes, decoded
        // here independently of the loader.
        const auto p = s.parameters()[which];
        const std::uint8_t* f = data + 1;  // the file
        const std::size_t bytes = size - 1;
        FUZZ_CHECK(bytes >= 12);
        const std::size_t offset = f[6] == 1 ? 10 + (f[8] | (f[9] << 8))
                                             : 12 + (f[8] | (f[9] << 8) | (f[10] << 16) | (std::size_t(f[11]) << 24));
        FUZZ_CHECK(bytes > offset && (bytes - offset) % p.size == 0);
        const std::size_t item = (bytes - offset) / p.size;
        FUZZ_CHECK(item == 4 || item == 8);
        const bool f8 = item == 8;
        const std::uint8_t* values = f + offset;
        for (std::size_t i = 0; i < p.size; ++i) {
            double want;
            if (f8) {
                std::memcpy(&want, values + i * 8, 8);
            } else {
                float single;
                std::memcpy(&single, values + i * 4, 4);
                want = single;
            }
            FUZZ_CHECK(std::memcmp(&p.data[i], &want, sizeof(double)) == 0 || (p.data[i] != p.data[i] && want != want));
        }
    } else {
        FUZZ_CHECK(snapshot(s) == before);
    }
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(keep.data(), static_cast<std::streamsize>(keep.size()));
    return 0;
}
