// The Communicator interface the CP schedules talk through (docs/design.md §4).
//
// Buffers live in the memory space of the attention backend the schedule runs with.
//
// Ordering ("stream order"). Every call is ordered against the backend's compute stream:
//  - a transfer starts after the work the compute stream holds when it is posted (so it reads
//    finished data, and a receive does not overwrite a buffer that queued work still reads);
//  - CommRequest::wait() orders the work enqueued on the compute stream after the call behind the
//    transfer's completion;
//  - all_gather and reduce_scatter_sum are complete for every later compute-stream call.
// Host communicators (threads, mpi) have a synchronous "stream": wait() and the collectives block
// the host until the data is there. Stream-ordered communicators (device, nccl) never block the
// host for data: they make the compute stream wait on an event of their transfer stream. The
// schedules are written once against this rule and run unchanged on both kinds.
//
// Failures. Every host wait has a deadline (timeout_seconds()); a peer that failed or a transport
// error turns into ringpack::Error naming this rank, the peer when known, and the cause.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "ringpack/timeline.h"

namespace ringpack {

// Which Communicator implementation a run uses (docs/design.md §4).
enum class CommKind {
  kThreads,  // CPU ranks as threads of one process (in-process transfers)
  kDevice,   // virtual ranks of one GPU (device-to-device copies on a transfer stream)
  kMpi,      // CPU ranks in separate processes over MPI
  kNccl,     // one process per GPU over NCCL
};

const char* comm_kind_name(CommKind kind);  // "threads", "device", "mpi", "nccl"
CommKind parse_comm_kind(std::string_view name);

// Seconds a host wait blocks before it gives up (--comm-timeout).
constexpr double kDefaultCommTimeoutSeconds = 300.0;

class CommRequest {
 public:
  virtual ~CommRequest() = default;
  // Orders later compute-stream work behind the transfer (host communicators: blocks until it
  // finished). Idempotent.
  virtual void wait() = 0;
  // Timeline marks (start, end) around the transfer on the communicator's stream, when the
  // communicator was given a timeline and records transfer spans.
  virtual std::optional<std::pair<size_t, size_t>> marks() const { return std::nullopt; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) = 0;
  virtual std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) = 0;

  // Sends `bytes` of `send` to rank `dst` and receives `bytes` into `recv` from rank `src` as one
  // request (NCCL: one group of send and receive, so a ring of any size cannot deadlock).
  // Default: isend + irecv.
  virtual std::unique_ptr<CommRequest> exchange(const void* send, int dst, void* recv, int src,
                                                size_t bytes);

  // recv = [size][bytes]: rank r's `send` lands at offset r * bytes.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // send = [size][count] fp32; recv[i] = sum over ranks of their send[rank()][i].
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t count) = 0;
  // Blocks the host until every rank arrived (and, stream-ordered, until queued transfers ran).
  virtual void barrier() = 0;

  // Bytes this rank has sent so far (point-to-point and collectives).
  virtual uint64_t bytes_sent() const = 0;

  // The transfer stream (cudaStream_t) of a stream-ordered communicator; nullptr for host ones.
  virtual void* stream() const { return nullptr; }
  // Seconds a host wait may block before it throws.
  virtual double timeout_seconds() const { return kDefaultCommTimeoutSeconds; }
  // Throws ringpack::Error when a peer failed or the transport reported an error; never blocks.
  virtual void check_failures() {}
  // Stops every transfer in flight so that nothing waits on them any more (NCCL: the
  // communicator is aborted); called on the way out of a failed run. The communicator is
  // unusable afterwards.
  virtual void abort() {}
  // Stream-ordered communicators mark their transfers on `timeline` (nullptr: stop marking).
  virtual void set_timeline(Timeline* /*timeline*/) {}
};

// Runs fn(comm) on `size` threads, one per rank, over an in-process communicator whose
// transfers run on a progress thread concurrently with the ranks' compute. Rethrows the first
// exception of any rank (the others are released) after all threads joined.
void run_in_process(int size, const std::function<void(Communicator&)>& fn,
                    double timeout_seconds = kDefaultCommTimeoutSeconds);

}  // namespace ringpack
