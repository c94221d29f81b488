// Tests for biaffine/scorer_io.hpp: .npy round trips (read back by xtensor's
// own reader, an independent parser), float32 files into a double scorer, and
// every way a weight file can be wrong - each must throw a biaffine::error
// naming the file, leave every parameter bitwise as it was (all or nothing),
// and allocate nothing for a size it has not checked.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include "biaffine/biaffine.hpp"

namespace fs = std::filesystem;
using namespace biaffine;

namespace {

scorer_config io_config()
{
    scorer_config c;
    c.n_in = 5;
    c.hidden = 3;
    c.labels = 2;
    c.seed = 11;
    return c;
}

// A fresh, empty directory under the system temp dir.
std::string fresh_dir(const std::string& name)
{
    const fs::path p = fs::temp_directory_path() / ("biaffine_io_" + name);
    fs::remove_all(p);
    fs::create_directories(p);
    return p.string();
}

// Every parameter's bytes, to compare "bitwise unchanged".
template <class T>
std::vector<std::vector<unsigned char>> snapshot(biaffine_scorer<T>& s)
{
    std::vector<std::vector<unsigned char>> out;
    for (const auto& p : s.parameters()) {
        const auto* b = reinterpret_cast<const unsigned char*>(p.data);
        out.emplace_back(b, b + p.size * sizeof(T));
    }
    return out;
}

std::string read_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// An .npy v1.0 file with this header dict and `data_bytes` zero bytes of data.
std::string npy_bytes(const std::string& dict, std::size_t data_bytes)
{
    std::string h = dict;
    while ((10 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::string f = std::string("\x93NUMPY\x01\x00", 8);
    f += static_cast<char>(h.size() & 0xff);
    f += static_cast<char>(h.size() >> 8);
    return f + h + std::string(data_bytes, '\0');
}

// Loads `dir` into a scorer whose parameters were drawn from another seed and
// checks it throws E with `needle` in the message and changes nothing, and
// that the tracker saw no allocation.
template <class E>
void require_rejected(const std::string& dir, const std::string& needle)
{
    scorer_config c = io_config();
    c.seed = 99;
    biaffine_scorer<double> s(c);
    const auto before = snapshot(s);
    const std::uint64_t allocs = tracker().allocations();
    bool threw = false;
    try {
        load_npy(s, dir);
    } catch (const E& e) {
        threw = true;
        INFO("message: " << e.what());
        CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
    REQUIRE(threw);
    REQUIRE(tracker().allocations() - allocs <= 4);  // the good files' temporaries at most
    REQUIRE(snapshot(s) == before);
}

}  // namespace

TEST_CASE("save_npy / load_npy round trip, and the files are standard .npy", "[scorer_io]")
{
    const std::string dir = fresh_dir("roundtrip");
    biaffine_scorer<float> a(io_config());
    save_npy(a, dir);
    // No temporaries left behind.
    std::size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        ++files;
        REQUIRE(e.path().extension() == ".npy");
        REQUIRE(e.path().filename().string()[0] != '.');
    }
    REQUIRE(files == 5);
    // xtensor's reader (an independent parser) reads what we wrote.
    for (const auto& p : a.parameters()) {
        const auto arr = xt::load_npy<float>(dir + "/" + p.name + ".npy");
        REQUIRE(std::vector<std::size_t>(arr.shape().begin(), arr.shape().end()) == p.shape);
        REQUIRE(std::memcmp(arr.data(), p.data, p.size * sizeof(float)) == 0);
    }
    // float32 files into a float scorer: bitwise; into a double scorer: exact conversions.
    scorer_config other = io_config();
    other.seed = 5;
    biaffine_scorer<float> b(other);
    load_npy(b, dir);
    REQUIRE(snapshot(b) == snapshot(a));
    biaffine_scorer<double> d(other);
    load_npy(d, dir);
    const auto pa = a.parameters();
    const auto pd = d.parameters();
    for (std::size_t i = 0; i < pa.size(); ++i) {
        for (std::size_t j = 0; j < pa[i].size; ++j) REQUIRE(pd[i].data[j] == static_cast<double>(pa[i].data[j]));
    }
    // The deprecated members still work (one release).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    biaffine_scorer<float> c(other);
    a.save_npy(dir);
    c.load_npy(dir);
#pragma GCC diagnostic pop
    REQUIRE(snapshot(c) == snapshot(a));
    fs::remove_all(dir);
}

TEST_CASE("load_npy rejects a truncated file and changes nothing", "[scorer_io]")
{
    const std::string dir = fresh_dir("truncated");
    biaffine_scorer<double> a(io_config());
    save_npy(a, dir);
    const std::string path = dir + "/dependent_weight.npy";
    write_file(path, read_file(path).substr(0, 148));
    require_rejected<error>(dir, "dependent_weight.npy");
    require_rejected<error>(dir, "truncated");
    fs::remove_all(dir);
}

TEST_CASE("load_npy: a wrong shape after good files changes nothing", "[scorer_io]")
{
    const std::string dir = fresh_dir("wrong_shape");
    biaffine_scorer<double> a(io_config());
    save_npy(a, dir);
    // bilinear_weight is read last; the four before it are good.
    write_file(dir + "/bilinear_weight.npy",
               npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4, 3), }", 2 * 4 * 3 * 8));
    require_rejected<shape_error>(dir, "bilinear_weight.npy holds shape [2, 4, 3], expected [2, 4, 4]");
    fs::remove_all(dir);
}

TEST_CASE("load_npy: a huge declared shape or a short file is rejected before any allocation", "[scorer_io]")
{
    const std::string dir = fresh_dir("huge");
    biaffine_scorer<double> a(io_config());
    save_npy(a, dir);
    write_file(dir + "/head_weight.npy",
               npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4000000000, 4000000000), }", 16));
    {
        scorer_config c = io_config();
        biaffine_scorer<double> s(c);
        const auto before = snapshot(s);
        const std::uint64_t allocs = tracker().allocations();
        REQUIRE_THROWS_AS(load_npy(s, dir), shape_error);
        REQUIRE(tracker().allocations() == allocs);  // head_weight is the first file: nothing read yet
        REQUIRE(snapshot(s) == before);
    }
    // The right shape declared, but no data behind it.
    write_file(dir + "/head_weight.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 5), }", 0));
    require_rejected<error>(dir, "head_weight.npy has ");
    fs::remove_all(dir);
}

TEST_CASE("load_npy rejects bad magic, headers, dtypes and Fortran order, naming the file", "[scorer_io]")
{
    const std::string dir = fresh_dir("bad_headers");
    biaffine_scorer<double> a(io_config());
    save_npy(a, dir);
    const std::string path = dir + "/head_bias.npy";
    const std::string good = read_file(path);
    struct bad {
        std::string bytes;
        std::string needle;
    };
    const std::vector<bad> cases = {
        {"not an npy file at all", "head_bias.npy is not an .npy file"},
        {std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 17), "truncated header"},
        {npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 12), "dtype '<i4'"},
        {npy_bytes("{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }", 24), "dtype '>f8'"},
        {npy_bytes("{'descr': '<f8', 'fortran_order': True, 'shape': (3,), }", 24), "Fortran order"},
        {npy_bytes("{'descr': '<f8', 'fortran_order': False, }", 24), "no 'shape'"},
        {npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (x,), }", 24), "malformed shape"},
        {good + "trailing", "trailing bytes"},
    };
    for (const bad& b : cases) {
        INFO("expecting: " << b.needle);
        write_file(path, b.bytes);
        require_rejected<error>(dir, b.needle);
    }
    fs::remove(path);
    require_rejected<error>(dir, "load_npy: cannot open " + path);
    fs::remove_all(dir);
}

TEST_CASE("save_npy to a missing folder throws biaffine::error and leaves nothing", "[scorer_io]")
{
    const std::string dir = fresh_dir("missing") + "/no/such/folder";
    biaffine_scorer<float> a(io_config());
    REQUIRE_THROWS_WITH(save_npy(a, dir), Catch::Contains("save_npy: cannot create") && Catch::Contains(dir));
    REQUIRE(!fs::exists(dir));
}

TEST_CASE("the scorer's constructor checks the sizes of its parameters", "[scorer_io][scorer]")
{
    scorer_config c = io_config();
    c.hidden = std::size_t(1) << 62;
    REQUIRE_THROWS_AS(biaffine_scorer<float>(c), overflow_error);
    c = io_config();
    c.labels = std::size_t(1) << 40;
    c.hidden = std::size_t(1) << 20;
    REQUIRE_THROWS_AS(biaffine_scorer<double>(c), overflow_error);
}
