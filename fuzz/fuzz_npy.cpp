// fuzz_npy - load_npy over arbitrary weight files.
//
// The input's first byte picks which of the scorer's five .npy files it
// replaces (the other four are valid files written once per process); the
// rest is that file's bytes. Properties: load_npy either succeeds, with every
// parameter equal to what the files hold (the fuzzed file checked through
// xtensor's own reader), or throws a biaffine::error and leaves every
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
        // The fuzzed file, read by xtensor: the same values.
        const auto& p = s.parameters()[which];
        xt::xarray<double> ref;
        bool read = true;
        try {
            std::ifstream f(path, std::ios::binary);
            std::string h(128, '\0');
            f.read(h.data(), 128);
            ref = h.find("'<f8'") != std::string::npos ? xt::load_npy<double>(path)
                                                       : xt::xarray<double>(xt::cast<double>(xt::load_npy<float>(path)));
        } catch (const std::exception&) {
            read = false;  // a header xtensor's parser does not take: nothing to compare
        }
        if (read && ref.size() == p.size) {
            for (std::size_t i = 0; i < p.size; ++i) {
                FUZZ_CHECK(std::memcmp(&p.data[i], &ref.data()[i], sizeof(double)) == 0 ||
                           (p.data[i] != p.data[i] && ref.data()[i] != ref.data()[i]));
            }
        }
    } else {
        FUZZ_CHECK(snapshot(s) == before);
    }
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(keep.data(), static_cast<std::streamsize>(keep.size()));
    return 0;
}
