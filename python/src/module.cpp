// python/src/module.cpp - the `biaffine._biaffine` extension: the C++ pipeline
// on numpy arrays (see docs/api.md, "Python").
//
// Inputs: C-contiguous float32 / float64 numpy arrays of the scorer's dtype
// are read in place (the C++ layers get views of their buffers); anything
// else is refused with TypeError (dtype, not an array) or ValueError (not
// C-contiguous) / biaffine.ShapeError (number of dimensions) before any work.
// Outputs: the C++ score and gradient tensors are moved into a capsule that
// owns them, and the numpy array is a view of that capsule's buffer, so no
// copy is made and the arrays outlive the scorer. The GIL is released while
// C++ runs. Only the public API is used (no biaffine::detail names). The
// parts, one translation unit each, are listed in common.hpp (their binders).
#include "common.hpp"

#include <biaffine/version.hpp>

namespace biaffine_py {
namespace {

// The Python mirrors of the C++ errors (g_exc) and the translator to them.
void bind_errors(py::module_& m)
{
    // The exception hierarchy of include/biaffine/errors.hpp. biaffine::error
    // is a std::invalid_argument, so Error is a ValueError; OverflowError is
    // also the builtin OverflowError.
    py::object builtins = py::module_::import("builtins");
    auto make = [&](const char* name, py::object bases, const char* doc) {
        py::dict ns;
        ns["__doc__"] = doc;
        ns["__module__"] = "biaffine";
        py::object cls = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(name, bases, ns);
        m.attr(name) = cls;
        return cls.release().ptr();
    };
    g_exc.error = make("Error", py::make_tuple(builtins.attr("ValueError")),
                       "Base of every biaffine error (C++ biaffine::error, a std::invalid_argument).");
    g_exc.shape = make("ShapeError", py::make_tuple(py::handle(g_exc.error)), "A shape or width does not match (biaffine::shape_error).");
    g_exc.length = make("LengthError", py::make_tuple(py::handle(g_exc.error)),
                        "A negative or out-of-range length (biaffine::length_error).");
    g_exc.budget = make("BudgetError", py::make_tuple(py::handle(g_exc.error)),
                        "A zero or too-small budget, an oversize split under oversize='throw' "
                        "(biaffine::budget_error).");
    g_exc.overflow = make("OverflowError", py::make_tuple(py::handle(g_exc.budget), builtins.attr("OverflowError")),
                          "A size computation overflows 64 bits (biaffine::overflow_error).");
    g_exc.backprop = make("BackpropError", py::make_tuple(py::handle(g_exc.error)),
                          "A backprop callback called twice or empty (biaffine::backprop_error).");
    g_exc.head = make("HeadError", py::make_tuple(py::handle(g_exc.error)),
                      "A list of heads missing, of the wrong length, or an index outside its split "
                      "(biaffine::head_error).");
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const biaffine::overflow_error& e) {
            PyErr_SetString(g_exc.overflow, e.what());
        } catch (const biaffine::budget_error& e) {
            PyErr_SetString(g_exc.budget, e.what());
        } catch (const biaffine::shape_error& e) {
            PyErr_SetString(g_exc.shape, e.what());
        } catch (const biaffine::length_error& e) {
            PyErr_SetString(g_exc.length, e.what());
        } catch (const biaffine::backprop_error& e) {
            PyErr_SetString(g_exc.backprop, e.what());
        } catch (const biaffine::head_error& e) {
            PyErr_SetString(g_exc.head, e.what());
        } catch (const biaffine::error& e) {
            PyErr_SetString(g_exc.error, e.what());
        }
        // Anything else (std::bad_alloc -> MemoryError, pybind11's own, a
        // Python exception from a callback) goes to the default translators.
    });
}

}  // namespace
}  // namespace biaffine_py

// python/CMakeLists.txt builds this once per ISA variant, as _biaffine_<variant>.
#ifndef BIAFFINE_PY_MODULE
#define BIAFFINE_PY_MODULE _biaffine
#endif

PYBIND11_MODULE(BIAFFINE_PY_MODULE, m)
{
    m.doc() = "biaffine: split-batched biaffine scoring with bounded peak memory (C++ core)";
#if PYBIND11_VERSION_HEX < 0x020C0000
    // pybind11 before 2.12 reads numpy 2's arrays wrongly without an error
    // (seen: argmax_heads of a 3x3 float64 matrix all 1 under pybind11 2.10
    // and numpy 2.4): refuse to load rather than give wrong numbers.
    {
        const std::string np_version = py::module_::import("numpy").attr("__version__").cast<std::string>();
        if (std::atoi(np_version.c_str()) >= 2) {
            throw py::import_error(
                std::string("biaffine: this module was built with pybind11 ") + PYBIND11_TOSTRING(PYBIND11_VERSION_MAJOR) "." +
                PYBIND11_TOSTRING(PYBIND11_VERSION_MINOR) ", which does not support numpy 2, and numpy " + np_version +
                " is imported: install it with pip (which builds with pybind11 >= 2.12) or use numpy < 2 (Debian's "
                "python3-numpy)");
        }
    }
#endif
    m.attr("__version__") = biaffine::version_string;
    // The ABI name this module was compiled under (include/biaffine/abi.hpp):
    // version, float backend, ISA level.
    m.attr("abi_tag") = biaffine::abi_tag;
    biaffine_py::bind_build_info(m);

    biaffine_py::bind_errors(m);
    biaffine_py::bind_budget(m);

    biaffine_py::bind_scorer_float32(m);
    biaffine_py::bind_scorer_float64(m);
    biaffine_py::bind_decoding(m);
    biaffine_py::bind_tree_crf(m);
    biaffine_py::bind_layers(m);
    biaffine_py::bind_io(m);
}
