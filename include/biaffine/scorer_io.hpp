// biaffine/scorer_io.hpp - the scorer's parameters to and from .npy files, one
// `<name>.npy` per entry of parameters() (the names the PyTorch reference's
// golden generator writes). Serialisation only: it sees the scorer through
// parameters() and set_parameter(), never its math.
#pragma once

#include <cstddef>
#include <fstream>
#include <string>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include "biaffine/errors.hpp"
#include "biaffine/scorer.hpp"

namespace biaffine {

namespace detail {

// An .npy file of float32 or float64, as double.
inline xt::xarray<double> load_npy_any(const std::string& path)
{
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw error(msg("load_npy: cannot open ", path));
    char header[128] = {};
    probe.read(header, sizeof(header));
    const std::string h(header, static_cast<std::size_t>(probe.gcount()));
    if (h.find("'<f4'") != std::string::npos) return xt::cast<double>(xt::load_npy<float>(path));
    if (h.find("'<f8'") != std::string::npos) return xt::load_npy<double>(path);
    throw error(msg("load_npy: ", path, " is not a float32 or float64 .npy file"));
}

}  // namespace detail

/// Writes `<dir>/<name>.npy` for every parameter of `scorer` (float64 files
/// when T is double, float32 otherwise). The directory must exist.
template <class T>
void save_npy(const biaffine_scorer<T>& scorer, const std::string& dir)
{
    for (const auto& p : scorer.parameters()) {
        xt::dump_npy(dir + "/" + p.name + ".npy", xt::adapt(p.data, p.size, xt::no_ownership(), p.shape));
    }
}

/// Reads `<dir>/<name>.npy` for every parameter of `scorer` (as written by
/// save_npy or the golden generator; float32 or float64 files), checking
/// shapes.
template <class T>
void load_npy(biaffine_scorer<T>& scorer, const std::string& dir)
{
    for (const auto& p : scorer.parameters()) {
        scorer.set_parameter(p.name, detail::load_npy_any(dir + "/" + p.name + ".npy"));
    }
}

template <class T>
void biaffine_scorer<T>::save_npy(const std::string& dir) const
{
    biaffine::save_npy(*this, dir);
}

template <class T>
void biaffine_scorer<T>::load_npy(const std::string& dir)
{
    biaffine::load_npy(*this, dir);
}

}  // namespace biaffine
