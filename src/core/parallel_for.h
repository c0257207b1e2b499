// A small parallel loop of the CPU code (the CPU backends, the random inputs, the shards): work
// items [0, count) claimed one at a time from a shared counter by `num_threads` threads (the
// calling thread is one of them).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "ringpack/error.h"

namespace ringpack {

// 0 means one thread per hardware thread.
inline int resolve_num_threads(int requested) {
  if (requested > 0) return requested;
  return std::max(1, int(std::thread::hardware_concurrency()));
}

// Threads of the host loops that fill or copy big buffers (the random inputs, the shards): one per
// hardware thread, at most 16.
inline int buffer_threads() {
  return std::min(16, resolve_num_threads(0));
}

// Runs body(item) once for every item in [0, count). Items must not write shared memory that
// another item writes. The first exception thrown by any item is rethrown here. When a worker
// thread cannot be started, the ones already started are joined and ringpack::Error is thrown.
template <class Body>
void parallel_for(int64_t count, int num_threads, const Body& body) {
  const int threads = int(std::min<int64_t>(std::max(1, num_threads), count));
  if (threads <= 1) {
    for (int64_t item = 0; item < count; ++item) body(item);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&] {
    try {
      for (int64_t item = next++; item < count; item = next++) body(item);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = count;  // stop handing out work
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error& e) {
      next = count;  // the started threads stop after their current item
      for (std::thread& thread : pool) thread.join();
      RINGPACK_FAIL("could not start CPU worker thread ", t, " of ", threads, " (", e.what(),
                    "): pass a smaller --threads, or raise the process's thread or memory limit");
    }
  }
  worker();
  for (std::thread& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

// Runs body(begin, end, block) for the blocks [begin, end) of `block_size` elements (the last one
// shorter) that cover [0, count), on buffer_threads() threads. Fixed blocks keep what a block
// computes independent of the number of threads.
template <class Body>
void parallel_for_blocks(size_t count, size_t block_size, const Body& body) {
  const int64_t blocks = int64_t((count + block_size - 1) / block_size);
  parallel_for(blocks, buffer_threads(), [&](int64_t block) {
    const size_t begin = size_t(block) * block_size;
    body(begin, std::min(count, begin + block_size), uint64_t(block));
  });
}

}  // namespace ringpack
