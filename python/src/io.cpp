// python/src/io.cpp - a scorer's parameters to and from .npy files, and the
// memory accounting (the process-wide tracker, the memory log and its CSV).
#include "common.hpp"

#include <biaffine/memory.hpp>
#include <biaffine/memory_log.hpp>
#include <biaffine/scorer.hpp>
#include <biaffine/scorer_io.hpp>

namespace biaffine_py {
namespace {

py::dict stats_dict(const biaffine::memory_stats& s)
{
    py::dict d;
    d["current_bytes"] = s.current_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["output_bytes"] = s.output_bytes;
    d["work_peak_bytes"] = s.work_peak_bytes;
    d["allocations"] = s.allocations;
    d["frees"] = s.frees;
    return d;
}

template <class T>
void bind_scorer_io(py::module_& m, const char* name)
{
    // Methods of the scorer class scorer_<dtype>.cpp made (bound before this).
    using S = biaffine::biaffine_scorer<T>;
    auto cls = py::reinterpret_borrow<py::class_<S>>(m.attr(name));
    cls.def("save_npy", [](S& s, const std::string& dir) { biaffine::save_npy(s, dir); }, py::arg("dir"))
        .def("load_npy", [](S& s, const std::string& dir) { biaffine::load_npy(s, dir); }, py::arg("dir"));
}

}  // namespace

void bind_io(py::module_& m)
{
    bind_scorer_io<float>(m, "biaffine_scorer_float32");
    bind_scorer_io<double>(m, "biaffine_scorer_float64");

    // Memory accounting: the process-wide tracker and the memory log.
    m.def("memory_stats", []() { return stats_dict(biaffine::tracker().stats()); },
          "The tracker's figures: current, peak, output and work-peak bytes, allocation and free counts.");
    m.def("reset_peak", []() { biaffine::tracker().reset_peak(); });
    m.def("set_limit", [](std::uint64_t b) { biaffine::tracker().set_limit(b); }, py::arg("bytes"),
          "A hard cap on tracked bytes (0: none); an allocation over it raises MemoryError.");
    m.def("limit", []() { return biaffine::tracker().limit(); });
    m.def("format_bytes", [](double b) { return biaffine::format_bytes(b); }, py::arg("bytes"));

    py::class_<biaffine::memory_checkpoint>(m, "memory_checkpoint")
        .def_readonly("label", &biaffine::memory_checkpoint::label)
        .def_readonly("current_bytes", &biaffine::memory_checkpoint::current_bytes)
        .def_readonly("peak_bytes", &biaffine::memory_checkpoint::peak_bytes)
        .def_readonly("change_bytes", &biaffine::memory_checkpoint::change_bytes)
        .def_readonly("seconds", &biaffine::memory_checkpoint::seconds)
        .def("__repr__", [](const biaffine::memory_checkpoint& c) {
            return "memory_checkpoint(" + c.label + ", current=" + std::to_string(c.current_bytes) +
                   ", peak=" + std::to_string(c.peak_bytes) + ", change=" + std::to_string(c.change_bytes) + ")";
        });
    py::class_<biaffine::memory_log>(m, "memory_log")
        .def(py::init<>())
        .def("checkpoint", &biaffine::memory_log::checkpoint, py::arg("label"), py::return_value_policy::copy)
        .def("checkpoints", &biaffine::memory_log::checkpoints, py::return_value_policy::copy)
        .def("peak_bytes", &biaffine::memory_log::peak_bytes)
        .def("summary", &biaffine::memory_log::summary)
        .def("write_csv", [](const biaffine::memory_log& l, const std::string& path) { l.write_csv(path); },
             py::arg("path"));
}

}  // namespace biaffine_py
