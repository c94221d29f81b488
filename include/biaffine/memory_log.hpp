// biaffine/memory_log.hpp - named checkpoints, a summary table and CSV.
//
// The measuring habit of the BART memory workstream, made exact: each
// checkpoint records the tracker's current and peak bytes (peak since the
// previous checkpoint), the change since the previous checkpoint and the
// elapsed time. Cheap (a lock and a clock read), so it can stay in code.
#pragma once

#include "biaffine/abi.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "biaffine/errors.hpp"
#include "biaffine/memory.hpp"

BIAFFINE_NAMESPACE_BEGIN

/// One row of a memory_log.
struct memory_checkpoint {
    std::string label;               ///< the name given to checkpoint()
    std::uint64_t current_bytes = 0; ///< tracked bytes alive at the checkpoint
    std::uint64_t peak_bytes = 0;    ///< peak since the previous checkpoint (or the log's start)
    std::int64_t change_bytes = 0;   ///< current minus the previous checkpoint's current
    double seconds = 0.0;            ///< since the log started
};

/// Formats bytes as "12.3 MB" (powers of 1024, one decimal).
inline std::string format_bytes(double bytes)
{
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    double v = bytes < 0 ? -bytes : bytes;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.1f %s", bytes < 0 ? "-" : "", v, units[u]);
    return buf;
}

/// A list of named checkpoints of the tracker. Not thread-safe itself (one
/// log per thread); the tracker it reads is.
class memory_log {
public:
    using clock = std::chrono::steady_clock;

    /// Starts the clock and opens a peak window at the current bytes.
    memory_log() : start_(clock::now()), last_current_(tracker().current_bytes()) { tracker().reset_peak(); }

    /// Records a checkpoint; the peak window restarts after it.
    const memory_checkpoint& checkpoint(const std::string& label)
    {
        const memory_stats s = tracker().stats();
        memory_checkpoint c;
        c.label = label;
        c.current_bytes = s.current_bytes;
        c.peak_bytes = s.peak_bytes;
        c.change_bytes = static_cast<std::int64_t>(s.current_bytes) - static_cast<std::int64_t>(last_current_);
        c.seconds = std::chrono::duration<double>(clock::now() - start_).count();
        last_current_ = s.current_bytes;
        overall_peak_ = std::max(overall_peak_, s.peak_bytes);
        rows_.push_back(c);
        tracker().reset_peak();
        return rows_.back();
    }

    /// Every checkpoint so far, in order.
    const std::vector<memory_checkpoint>& checkpoints() const noexcept { return rows_; }
    /// Highest peak over all checkpoints.
    std::uint64_t peak_bytes() const noexcept { return overall_peak_; }

    /// A fixed-width text table, one row per checkpoint, then the overall peak.
    std::string summary() const
    {
        std::ostringstream os;
        char line[256];
        std::snprintf(line, sizeof(line), "%-32s %12s %12s %12s %10s\n", "checkpoint", "current", "peak", "change",
                      "time (s)");
        os << line;
        for (const memory_checkpoint& c : rows_) {
            std::snprintf(line, sizeof(line), "%-32s %12s %12s %12s %10.3f\n", c.label.c_str(),
                          format_bytes(static_cast<double>(c.current_bytes)).c_str(),
                          format_bytes(static_cast<double>(c.peak_bytes)).c_str(),
                          format_bytes(static_cast<double>(c.change_bytes)).c_str(), c.seconds);
            os << line;
        }
        os << "overall peak: " << format_bytes(static_cast<double>(overall_peak_)) << " (" << overall_peak_
           << " bytes), allocations: " << tracker().allocations() << "\n";
        return os.str();
    }

    /// CSV with a header: label,current_bytes,peak_bytes,change_bytes,seconds.
    /// Labels are quoted (embedded quotes doubled).
    void write_csv(std::ostream& os) const
    {
        os << "label,current_bytes,peak_bytes,change_bytes,seconds\n";
        for (const memory_checkpoint& c : rows_) {
            std::string q;
            for (char ch : c.label) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
            os << '"' << q << "\"," << c.current_bytes << ',' << c.peak_bytes << ',' << c.change_bytes << ','
               << c.seconds << '\n';
        }
    }
    /// The same CSV into the file `path` (throws biaffine::error if it
    /// cannot be written).
    void write_csv(const std::string& path) const
    {
        std::ofstream f(path);
        if (!f) throw error(detail::msg("memory_log: cannot write ", path));
        write_csv(f);
    }

private:
    clock::time_point start_;
    std::uint64_t last_current_ = 0;
    std::uint64_t overall_peak_ = 0;
    std::vector<memory_checkpoint> rows_;
};

BIAFFINE_NAMESPACE_END
