// The Communicator interface the CP schedules talk through (docs/design.md §4, §6).
//
// Buffers live in the memory space of the attention backend the schedule runs with. Point-to-
// point calls are non-blocking: the buffers must stay valid and untouched until wait() returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace ringpack {

class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;  // blocks until the transfer finished; idempotent
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) = 0;
  virtual std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) = 0;

  // recv = [size][bytes]: rank r's `send` lands at offset r * bytes.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // send = [size][count] fp32; recv[i] = sum over ranks of their send[rank()][i].
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t count) = 0;
  virtual void barrier() = 0;

  // Bytes this rank has sent so far (point-to-point and collectives).
  virtual uint64_t bytes_sent() const = 0;
};

// Runs fn(comm) on `size` threads, one per rank, over an in-process communicator whose
// transfers run on a progress thread concurrently with the ranks' compute. Rethrows the first
// exception of any rank (the others are released) after all threads joined.
void run_in_process(int size, const std::function<void(Communicator&)>& fn);

}  // namespace ringpack
