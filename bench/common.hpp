// bench/common.hpp - small helpers shared by the bench binaries: clocks,
// process memory (max RSS, current RSS), flag parsing (a flag table and the
// flags every driver takes), one-line JSON writing and reading, medians,
// number formatting for the reports, the library's thread option when it
// has one.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "biaffine/detail/compute/backend.hpp"

namespace biaffine_bench {

inline double now_seconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// CPU time of the whole process (all threads), in seconds. On a busy
/// machine it is steadier than wall time for single-threaded work.
inline double cpu_seconds()
{
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// The process's high-water resident set (getrusage), in bytes.
inline std::uint64_t max_rss_bytes()
{
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

/// The process's resident set now (/proc/self/statm), in bytes.
inline std::uint64_t current_rss_bytes()
{
    std::ifstream f("/proc/self/statm");
    std::uint64_t size = 0, resident = 0;
    f >> size >> resident;
    return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

/// The widest vector ISA this CPU runs ("AVX-512", "AVX2+FMA", "AVX", "SSE").
inline const char* cpu_isa()
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "AVX-512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "AVX2+FMA";
    if (__builtin_cpu_supports("avx")) return "AVX";
    return "SSE";
}

/// The widest vector ISA this binary was compiled for.
inline const char* build_isa()
{
#if defined(__AVX512F__)
    return "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "AVX2+FMA";
#elif defined(__AVX__)
    return "AVX";
#else
    return "SSE";
#endif
}

/// Which backend runs each of the float scorer's operations in this build.
inline std::string float_backend()
{
    using B = biaffine::detail::compute_backend<float>;
    return std::string(B::name) + " (" + B::operations + ")";
}

/// The CPU model name from /proc/cpuinfo.
inline std::string cpu_model()
{
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto c = line.find(':');
            if (c != std::string::npos) return line.substr(line.find_first_not_of(' ', c + 1));
        }
    }
    return "unknown";
}

/// The vector ISA extensions the kernels can branch on, as /proc/cpuinfo's
/// "flags" line names them, in a fixed order ("avx2 fma ... avx512_bf16"):
/// what a reader needs to tell a native bf16 run from an emulated one.
inline std::string cpu_vector_flags()
{
    static const char* const wanted[] = {"sse4_2",      "avx",         "avx2",     "fma",      "f16c",
                                         "avx512f",     "avx512bw",    "avx512vl", "avx512_vnni",
                                         "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"};
    std::ifstream f("/proc/cpuinfo");
    std::set<std::string> have;
    for (std::string line; std::getline(f, line);) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        for (std::string w; words >> w;) have.insert(w);
        break;
    }
    std::string out;
    for (const char* w : wanted) {
        if (have.count(w)) out += (out.empty() ? "" : " ") + std::string(w);
    }
    return out.empty() ? "none listed" : out;
}

/// The 1, 5 and 15 minute load averages, as written in /proc/loadavg.
inline std::string load_average()
{
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    f >> a >> b >> c;
    return a + " " + b + " " + c;
}

inline double median(std::vector<double> v)
{
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

constexpr double mib = 1024.0 * 1024.0;
constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// ------------------------------------------------------------- formatting

/// printf of one number: fmt("%.3f", x).
inline std::string fmt(const char* f, double v)
{
    char buf[64];
    std::snprintf(buf, sizeof(buf), f, v);
    return buf;
}

/// 1000000 -> "1M", 20000 -> "20k", 1500 -> "1500".
inline std::string tokens_label(std::uint64_t t)
{
    if (t >= 1000000 && t % 1000000 == 0) return std::to_string(t / 1000000) + "M";
    if (t >= 1000 && t % 1000 == 0) return std::to_string(t / 1000) + "k";
    return std::to_string(t);
}

/// Why a run predicted to need `bytes` is not started under `--max-gb max_gb`.
inline std::string over_max_gb(double bytes, double max_gb)
{
    return "skipped: needs ~" + fmt("%.1f", bytes / gib) + " GiB (> --max-gb " + fmt("%g", max_gb) + ")";
}

// ------------------------------------------------------------------ flags

/// "1k", "10000", "1M", "2.5k" -> integer.
inline std::uint64_t parse_count(const std::string& s)
{
    if (s.empty()) throw std::invalid_argument("empty number");
    std::size_t pos = 0;
    const double v = std::stod(s, &pos);
    double mult = 1;
    const std::string suffix = s.substr(pos);
    if (suffix == "k" || suffix == "K") {
        mult = 1e3;
    } else if (suffix == "m" || suffix == "M") {
        mult = 1e6;
    } else if (!suffix.empty()) {
        throw std::invalid_argument("bad number '" + s + "'");
    }
    if (!(v >= 0)) throw std::invalid_argument("bad number '" + s + "'");
    return static_cast<std::uint64_t>(v * mult + 0.5);
}

inline std::vector<std::string> split_list(const std::string& s, char sep = ',')
{
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) {
        if (!item.empty()) out.push_back(item);
    }
    return out;
}

inline std::vector<std::uint64_t> parse_counts(const std::string& s)
{
    std::vector<std::uint64_t> out;
    for (const auto& x : split_list(s)) out.push_back(parse_count(x));
    return out;
}

/// argv walker: `--name value` and `--name=value`.
class args {
public:
    args(int argc, char** argv) : v_(argv + 1, argv + argc) {}
    bool done() const { return i_ >= v_.size(); }
    /// The next flag's name (value split off when written `--name=value`).
    std::string next()
    {
        std::string a = v_[i_++];
        const auto eq = a.find('=');
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            pending_ = a.substr(eq + 1);
            a = a.substr(0, eq);
        } else {
            pending_.reset();
        }
        return a;
    }
    std::string value(const std::string& flag)
    {
        if (pending_) {
            std::string v = *pending_;
            pending_.reset();
            return v;
        }
        if (i_ >= v_.size()) throw std::invalid_argument(flag + " needs a value");
        return v_[i_++];
    }

private:
    std::vector<std::string> v_;
    std::size_t i_ = 0;
    std::optional<std::string> pending_;
};

template <class>
inline constexpr bool unsupported_flag_type = false;

/// Flags bound to variables, parsed by the variable's type: bool is a switch
/// (sets true, takes no value); int std::stoi; double std::stod; std::string
/// as is; std::uint64_t parse_count; std::vector<std::uint64_t> parse_counts;
/// std::vector<std::string> split_list.
class flag_table {
public:
    template <class T>
    flag_table& add(const std::string& name, T& target)
    {
        T* p = &target;
        flags_.push_back({name, [p, name](args& a) {
                              if constexpr (std::is_same<T, bool>::value) {
                                  (void)a;
                                  *p = true;
                              } else if constexpr (std::is_same<T, int>::value) {
                                  *p = std::stoi(a.value(name));
                              } else if constexpr (std::is_same<T, double>::value) {
                                  *p = std::stod(a.value(name));
                              } else if constexpr (std::is_same<T, std::string>::value) {
                                  *p = a.value(name);
                              } else if constexpr (std::is_same<T, std::uint64_t>::value) {
                                  *p = parse_count(a.value(name));
                              } else if constexpr (std::is_same<T, std::vector<std::uint64_t>>::value) {
                                  *p = parse_counts(a.value(name));
                              } else if constexpr (std::is_same<T, std::vector<std::string>>::value) {
                                  *p = split_list(a.value(name));
                              } else {
                                  static_assert(unsupported_flag_type<T>, "no parser for this flag type");
                              }
                          }});
        return *this;
    }

    /// Walks argv in order (`--name value` or `--name=value`). `--help` / `-h`
    /// calls usage(0); an unknown flag prints "<prog>: unknown flag F" on
    /// stderr and calls usage(2) (usage is expected not to return).
    void parse(int argc, char** argv, const std::string& prog, void (*usage)(int))
    {
        args a(argc, argv);
        while (!a.done()) {
            const std::string f = a.next();
            const auto it = std::find_if(flags_.begin(), flags_.end(), [&](const flag& x) { return x.name == f; });
            if (it != flags_.end()) {
                it->set(a);
                seen_.insert(f);
            } else if (f == "--help" || f == "-h") {
                usage(0);
            } else {
                std::cerr << prog << ": unknown flag " << f << "\n";
                usage(2);
            }
        }
    }

    /// Whether parse() met the flag `name`.
    bool seen(const std::string& name) const { return seen_.count(name) != 0; }

private:
    struct flag {
        std::string name;
        std::function<void(args&)> set;
    };
    std::vector<flag> flags_;
    std::set<std::string> seen_;
};

/// The flags every driver takes, with one meaning: the workload (document
/// lengths, label counts, threads, train), the library's byte budget, the
/// memory cap, JSON lines, the Markdown report. A driver's options derive
/// from it, set their own defaults for the lists and add their own flags in
/// `void add_flags(flag_table&)`; parse_flags() fills them.
struct common_flags {
    std::vector<std::uint64_t> tokens;
    std::vector<std::uint64_t> labels;
    int threads = 1;
    bool train = false;
    double budget_mb = 16;
    double max_gb = 8;
    bool json = false;
    std::string md;
    /// Whether argv named any workload flag (--tokens, --labels, --threads, --train).
    bool workload_given = false;
};

/// A driver's options `O` (derived from common_flags) from argv: the common
/// flags and `O::add_flags`'s, parsed by flag_table::parse(argc, argv, prog, usage).
template <class O>
O parse_flags(int argc, char** argv, const std::string& prog, void (*usage)(int))
{
    O o;
    flag_table t;
    t.add("--tokens", o.tokens).add("--labels", o.labels).add("--threads", o.threads).add("--train", o.train);
    t.add("--budget-mb", o.budget_mb).add("--max-gb", o.max_gb).add("--json", o.json).add("--md", o.md);
    o.add_flags(t);
    t.parse(argc, argv, prog, usage);
    o.workload_given = t.seen("--tokens") || t.seen("--labels") || t.seen("--threads") || t.seen("--train");
    return o;
}

// ------------------------------------------------------------------- JSON

/// One flat JSON object on one line.
class json_line {
public:
    json_line& add(const std::string& key, const std::string& v)
    {
        std::string e;
        for (char c : v) {
            if (c == '"' || c == '\\') e += '\\';
            if (c == '\n') {
                e += "\\n";
                continue;
            }
            e += c;
        }
        return raw(key, "\"" + e + "\"");
    }
    json_line& add(const std::string& key, const char* v) { return add(key, std::string(v)); }
    json_line& add(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }
    json_line& add(const std::string& key, double v)
    {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.6g", v);
        return raw(key, buf);
    }
    template <class I, class = std::enable_if_t<std::is_integral<I>::value && !std::is_same<I, bool>::value>>
    json_line& add(const std::string& key, I v)
    {
        return raw(key, std::to_string(v));
    }
    json_line& null(const std::string& key) { return raw(key, "null"); }
    std::string str() const { return body_ + "}"; }

private:
    json_line& raw(const std::string& key, const std::string& v)
    {
        body_ += (body_.size() > 1 ? ", \"" : "\"") + key + "\": " + v;
        return *this;
    }
    std::string body_ = "{";
};

/// The raw value of `key` in a flat JSON line written by json_line (strings
/// unquoted); nullopt when absent.
inline std::optional<std::string> json_get(const std::string& line, const std::string& key)
{
    const std::string pat = "\"" + key + "\": ";
    const auto p = line.find(pat);
    if (p == std::string::npos) return std::nullopt;
    std::size_t i = p + pat.size();
    if (i < line.size() && line[i] == '"') {
        std::string out;
        for (++i; i < line.size() && line[i] != '"'; ++i) {
            if (line[i] == '\\' && i + 1 < line.size()) ++i;
            out += line[i];
        }
        return out;
    }
    const auto e = line.find_first_of(",}", i);
    return line.substr(i, e - i);
}

inline double json_num(const std::string& line, const std::string& key, double fallback = 0)
{
    const auto v = json_get(line, key);
    if (!v || *v == "null") return fallback;
    if (*v == "true") return 1;
    if (*v == "false") return 0;
    return std::stod(*v);
}

// ------------------------------------------------------- library options

/// Sets `opts.threads` when the library's option struct has one (the
/// parallel-batches work adds it); returns the thread count that applies.
template <class O, class = void>
struct has_threads_member : std::false_type {};
template <class O>
struct has_threads_member<O, std::void_t<decltype(std::declval<O&>().threads)>> : std::true_type {};

template <class O>
int apply_threads(O& opts, int threads)
{
    if constexpr (has_threads_member<O>::value) {
        opts.threads = static_cast<std::decay_t<decltype(opts.threads)>>(threads);
        return threads;
    } else {
        (void)opts;
        return 1;
    }
}

}  // namespace biaffine_bench
