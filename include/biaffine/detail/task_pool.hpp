// biaffine/detail/task_pool.hpp - a small fork-join pool for running batches in parallel.
//
// Lives for one layer call: threads start once, then each `run(n, fn)` hands
// out indices 0..n-1 to the workers and the calling thread until all are done.
// Every worker holds an outer workspace_scope for its whole life, so its
// scratch block is reused across batches instead of re-allocated per batch.
// The first exception thrown by any task is rethrown by run().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "biaffine/workspace.hpp"

namespace biaffine {
namespace detail {

class task_pool {
public:
    /// `threads` includes the calling thread; 1 means no extra thread.
    explicit task_pool(std::size_t threads)
    {
        for (std::size_t i = 1; i < threads; ++i) {
            workers_.emplace_back([this] { work(); });
        }
    }
    task_pool(const task_pool&) = delete;
    task_pool& operator=(const task_pool&) = delete;
    ~task_pool()
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        for (std::thread& t : workers_) t.join();
    }

    std::size_t threads() const noexcept { return workers_.size() + 1; }

    /// Runs fn(i) for every i in [0, n), in any order, on all threads.
    void run(std::size_t n, const std::function<void(std::size_t)>& fn)
    {
        if (workers_.empty()) {
            for (std::size_t i = 0; i < n; ++i) fn(i);
            return;
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = &fn;
            n_ = n;
            next_ = 0;
            active_ = workers_.size();
            error_ = nullptr;
            ++generation_;
        }
        wake_.notify_all();
        drain();
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return active_ == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
    void drain()
    {
        for (;;) {
            const std::size_t i = next_.fetch_add(1);
            if (i >= n_) return;
            try {
                (*job_)(i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(mutex_);
                if (!error_) error_ = std::current_exception();
                next_ = n_;  // stop handing out work
            }
        }
    }

    void work()
    {
        workspace_scope keep_scratch;  // reuse this thread's block across batches
        std::size_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
            }
            drain();
            std::lock_guard<std::mutex> lock(mutex_);
            if (--active_ == 0) done_.notify_one();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(std::size_t)>* job_ = nullptr;
    std::size_t n_ = 0;
    std::atomic<std::size_t> next_{0};
    std::size_t active_ = 0;
    std::size_t generation_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace detail
}  // namespace biaffine
