// biaffine/detail/scorer/io.hpp - the scorer's parameters to and from .npy
// files (public name: scorer_io.hpp), one `<name>.npy` per entry of
// parameters() (the names the PyTorch reference's golden generator writes). Serialisation only: it sees the scorer through
// parameters(), never its math.
//
// Both directions are all or nothing. load_npy reads and checks every file
// (magic, header, dtype, the declared shape against the scorer's, the file
// size against the declared shape - before allocating anything) into
// temporaries, and only then replaces the parameters. save_npy writes every
// file under a temporary name and renames them into place once all are
// written, so a failed save leaves no half-written set that would load.
#pragma once

#include "biaffine/abi.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "biaffine/detail/checked.hpp"
#include "biaffine/errors.hpp"
#include "biaffine/detail/scorer/declaration.hpp"
#include "biaffine/tensor.hpp"

BIAFFINE_NAMESPACE_BEGIN

namespace detail {

// The parts of an .npy header the loader needs.
struct npy_header {
    bool f8 = false;                 // '<f8' (else '<f4')
    std::vector<std::size_t> shape;  // C order
    std::uint64_t data_offset = 0;   // bytes before the array data
};

// Value of `key` in the header's dict literal, from after its ':' to the next
// ',' at nesting depth 0 (or the closing brace); throws when absent.
inline std::string npy_field(const std::string& dict, const std::string& key, const std::string& path)
{
    const std::string quoted = "'" + key + "'";
    const std::size_t at = dict.find(quoted);
    if (at == std::string::npos) throw error(msg("load_npy: ", path, ": the header has no '", key, "'"));
    std::size_t i = dict.find(':', at + quoted.size());
    if (i == std::string::npos) throw error(msg("load_npy: ", path, ": malformed header near '", key, "'"));
    ++i;
    int depth = 0;
    std::size_t end = i;
    for (; end < dict.size(); ++end) {
        const char c = dict[end];
        if (c == '(' || c == '[') ++depth;
        if (c == ')' || c == ']') --depth;
        if (depth == 0 && (c == ',' || c == '}')) break;
        if (depth < 0) break;
    }
    std::string v = dict.substr(i, end - i);
    const std::size_t b = v.find_first_not_of(" \t");
    const std::size_t e = v.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
}

// Reads and checks the header of `path` (size `file_size`).
inline npy_header read_npy_header(std::ifstream& in, const std::string& path, std::uint64_t file_size)
{
    char magic[8] = {};
    in.read(magic, 8);
    if (in.gcount() != 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
        throw error(msg("load_npy: ", path, " is not an .npy file (bad magic string)"));
    }
    const int major = static_cast<unsigned char>(magic[6]);
    std::uint64_t len = 0;
    std::uint64_t prefix = 0;
    if (major == 1) {
        unsigned char b[2] = {};
        in.read(reinterpret_cast<char*>(b), 2);
        if (in.gcount() != 2) throw error(msg("load_npy: ", path, ": truncated header"));
        len = b[0] | (static_cast<std::uint64_t>(b[1]) << 8);
        prefix = 10;
    } else if (major == 2 || major == 3) {
        unsigned char b[4] = {};
        in.read(reinterpret_cast<char*>(b), 4);
        if (in.gcount() != 4) throw error(msg("load_npy: ", path, ": truncated header"));
        len = b[0] | (static_cast<std::uint64_t>(b[1]) << 8) | (static_cast<std::uint64_t>(b[2]) << 16) |
              (static_cast<std::uint64_t>(b[3]) << 24);
        prefix = 12;
    } else {
        throw error(msg("load_npy: ", path, ": unsupported .npy format version ", major));
    }
    if (checked_add(prefix, len, "npy header") > file_size) {
        throw error(msg("load_npy: ", path, ": truncated header (", len, " header bytes declared, file has ",
                        file_size, " bytes)"));
    }
    std::string dict(static_cast<std::size_t>(len), '\0');
    in.read(dict.data(), static_cast<std::streamsize>(len));
    if (static_cast<std::uint64_t>(in.gcount()) != len) throw error(msg("load_npy: ", path, ": truncated header"));
    npy_header h;
    h.data_offset = prefix + len;
    const std::string descr = npy_field(dict, "descr", path);
    if (descr == "'<f4'") {
        h.f8 = false;
    } else if (descr == "'<f8'") {
        h.f8 = true;
    } else {
        throw error(msg("load_npy: ", path, " holds dtype ", descr, ", expected float32 '<f4' or float64 '<f8'"));
    }
    if (npy_field(dict, "fortran_order", path) != "False") {
        throw error(msg("load_npy: ", path, " is in Fortran order; save it C-ordered (numpy.ascontiguousarray)"));
    }
    const std::string shape = npy_field(dict, "shape", path);
    if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
        throw error(msg("load_npy: ", path, ": malformed shape ", shape));
    }
    std::size_t i = 1;
    while (i + 1 < shape.size()) {
        while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
        if (i + 1 >= shape.size()) break;
        std::uint64_t v = 0;
        std::size_t digits = 0;
        while (i + 1 < shape.size() && shape[i] >= '0' && shape[i] <= '9') {
            v = checked_add(checked_mul(v, 10, "npy shape"), static_cast<std::uint64_t>(shape[i] - '0'), "npy shape");
            ++i;
            ++digits;
        }
        if (digits == 0) throw error(msg("load_npy: ", path, ": malformed shape ", shape));
        h.shape.push_back(to_index_size(v, "npy shape"));
    }
    return h;
}

inline std::uint64_t file_size_of(std::ifstream& in)
{
    in.seekg(0, std::ios::end);
    const auto size = static_cast<std::uint64_t>(in.tellg());
    in.seekg(0, std::ios::beg);
    return size;
}

// Reads `path`, which must hold a float32 or float64 array of `shape`, into
// `out` (converted to T). Checks everything before allocating.
template <class T>
void read_npy_checked(const std::string& path, const std::vector<std::size_t>& shape, tracked_vector<T>& out)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error(msg("load_npy: cannot open ", path));
    const std::uint64_t size = file_size_of(in);
    const npy_header h = read_npy_header(in, path, size);
    if (h.shape != shape) {
        throw shape_error(msg("load_npy: ", path, " holds shape ", shape_str(h.shape), ", expected ",
                              shape_str(shape)));
    }
    std::uint64_t count = 1;
    for (std::size_t d : shape) count = checked_mul(count, d, "npy data");
    const std::uint64_t item = h.f8 ? 8 : 4;
    const std::uint64_t want = checked_add(h.data_offset, checked_mul(count, item, "npy data"), "npy data");
    if (size != want) {
        throw error(msg("load_npy: ", path, " has ", size, " bytes, expected ", want, " for ",
                        h.f8 ? "float64" : "float32", " ", shape_str(shape),
                        size < want ? " (truncated)" : " (trailing bytes)"));
    }
    out.assign(to_index_size(count, "npy data"), T(0));
    auto read_as = [&](auto tag) {
        using F = decltype(tag);
        std::vector<char> buf(64 * 1024 * sizeof(F));
        std::size_t done = 0;
        while (done < out.size()) {
            const std::size_t n = std::min(out.size() - done, buf.size() / sizeof(F));
            in.read(buf.data(), static_cast<std::streamsize>(n * sizeof(F)));
            if (static_cast<std::size_t>(in.gcount()) != n * sizeof(F)) {
                throw error(msg("load_npy: ", path, ": read failed after ", done, " of ", out.size(), " values"));
            }
            for (std::size_t i = 0; i < n; ++i) {
                F v;
                std::memcpy(&v, buf.data() + i * sizeof(F), sizeof(F));
                out[done + i] = static_cast<T>(v);
            }
            done += n;
        }
    };
    if (h.f8) {
        read_as(double{});
    } else {
        read_as(float{});
    }
}

// Writes one C-ordered little-endian .npy (format 1.0) of T to `path`;
// errors name `shown` (the file the user asked for).
template <class T>
void write_npy(const std::string& path, const std::string& shown, const T* data, std::size_t size,
               const std::vector<std::size_t>& shape)
{
    std::string dict = std::string("{'descr': '") + (sizeof(T) == 8 ? "<f8" : "<f4") +
                       "', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    dict += "), }";
    // Pad with spaces and a newline so the data starts 64-byte aligned.
    const std::size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
    dict.append(total - 10 - dict.size() - 1, ' ');
    dict += '\n';
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw error(msg("save_npy: cannot create ", shown, " (does the folder exist?)"));
    const std::size_t len = dict.size();
    const char prefix[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(len & 0xff),
                             static_cast<char>((len >> 8) & 0xff)};
    out.write(prefix, 10);
    out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size * sizeof(T)));
    out.flush();
    if (!out) throw error(msg("save_npy: writing ", shown, " failed"));
}

}  // namespace detail

/// Writes `<dir>/<name>.npy` for every parameter of `scorer` (float64 files
/// when T is double, float32 otherwise). The directory must exist. Each
/// file is written under a temporary name first; the set is renamed into
/// place only once every file is complete. Throws biaffine::error naming the
/// file on failure (temporaries removed).
template <class T, class Backend, class Out>
void save_npy(const biaffine_scorer<T, Backend, Out>& scorer, const std::string& dir)
{
    const auto params = scorer.parameters();
    std::vector<std::string> tmp;
    try {
        for (const auto& p : params) {
            tmp.push_back(dir + "/." + p.name + ".npy.partial");
            detail::write_npy(tmp.back(), dir + "/" + p.name + ".npy", p.data, p.size, p.shape);
        }
    } catch (...) {
        for (const std::string& t : tmp) std::remove(t.c_str());
        throw;
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
        const std::string path = dir + "/" + params[i].name + ".npy";
        if (std::rename(tmp[i].c_str(), path.c_str()) != 0) {
            for (std::size_t j = i; j < tmp.size(); ++j) std::remove(tmp[j].c_str());
            throw error(detail::msg("save_npy: cannot rename ", tmp[i], " to ", path));
        }
    }
}

/// Reads `<dir>/<name>.npy` for every parameter of `scorer` (as written by
/// save_npy or the golden generator; float32 or float64, C order). Every
/// file is read and checked before any parameter changes: on any error
/// (missing file, bad header, other dtype, wrong shape, wrong size) the
/// scorer is as before and the exception names the file and what is wrong.
template <class T, class Backend, class Out>
void load_npy(biaffine_scorer<T, Backend, Out>& scorer, const std::string& dir)
{
    // The const listing: loading allocates no gradient buffers. The scorer
    // itself is not const, so writing through its data pointers is fine.
    const auto params = std::as_const(scorer).parameters();
    std::vector<tracked_vector<T>> values(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
        detail::read_npy_checked(dir + "/" + params[i].name + ".npy", params[i].shape, values[i]);
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
        std::copy(values[i].begin(), values[i].end(), const_cast<T*>(params[i].data));
    }
    scorer.parameters_changed();  // written through the const listing's pointers
}

template <class T, class Backend, class Out>
void biaffine_scorer<T, Backend, Out>::save_npy(const std::string& dir) const
{
    biaffine::save_npy(*this, dir);
}

template <class T, class Backend, class Out>
void biaffine_scorer<T, Backend, Out>::load_npy(const std::string& dir)
{
    biaffine::load_npy(*this, dir);
}

BIAFFINE_NAMESPACE_END
