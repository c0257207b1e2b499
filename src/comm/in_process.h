// The in-process communicator: `size` ranks are threads of one process that share an
// InProcessWorld (docs/design.md §4, §6; interface in include/ringpack/comm.h).
//
// Point-to-point messages match by ordered pair (src, dst) and channel in posting order (FIFO).
// When a send and its recv are both posted, the pair becomes a transfer that a progress thread
// copies (memcpy, host memory), so transfers run while the rank threads compute. Collectives are
// built from point-to-point messages on their own channel, so they never match user messages.
//
// Failure: when a rank's function throws, the world is marked failed and every blocking call of
// the other ranks throws Error("aborted: rank r failed ..."), so no rank deadlocks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ringpack/comm.h"
#include "ringpack/error.h"

namespace ringpack {

// Thrown on the ranks that did not fail themselves; run_in_process prefers the real exception.
class AbortedError : public Error {
 public:
  using Error::Error;
};

// Messages of different channels never match each other.
enum class CommChannel : int { kPointToPoint = 0, kCollective = 1 };

// One posted isend or irecv. Guarded by InProcessWorld::mutex_.
struct CommOp {
  enum class State { kPosted, kQueued, kCopying, kDone, kFailed, kCancelled };
  State state = State::kPosted;
  bool is_send = false;
  int src = 0;  // sending rank
  int dst = 0;  // receiving rank
  CommChannel channel = CommChannel::kPointToPoint;
  const void* send_data = nullptr;  // is_send only
  void* recv_data = nullptr;        // !is_send only
  size_t bytes = 0;
  std::string error;  // kFailed: the message wait() throws
};

class InProcessWorld {
 public:
  InProcessWorld(int size, double timeout_seconds = kDefaultCommTimeoutSeconds);
  ~InProcessWorld();  // stops and joins the progress thread
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int size() const { return size_; }
  double timeout_seconds() const { return timeout_.count(); }

  // Posts an op; matches it with the oldest unmatched op of the other side of (src, dst, channel).
  std::shared_ptr<CommOp> post(bool is_send, int self, int peer, CommChannel channel,
                               const void* send_data, void* recv_data, size_t bytes);
  // Blocks until op is done; throws its error, or AbortedError when the world failed first.
  void wait(const std::shared_ptr<CommOp>& op);
  // Called when a request dies: unmatched ops are withdrawn, matched ones are waited for (their
  // buffers may be freed right after).
  void release(const std::shared_ptr<CommOp>& op);
  void barrier(int self);

  // A rank's function threw: release every blocked rank.
  void mark_failed(int rank);
  // A rank's function returned: ops still waiting for it can never match.
  void mark_finished(int rank);

 private:
  using PairKey = std::tuple<int, int, CommChannel>;  // (src, dst, channel)
  struct PendingOps {
    std::deque<std::shared_ptr<CommOp>> sends;
    std::deque<std::shared_ptr<CommOp>> recvs;
  };
  struct Transfer {
    std::shared_ptr<CommOp> send;
    std::shared_ptr<CommOp> recv;
  };

  void progress_loop();
  [[noreturn]] void throw_aborted() const;  // needs mutex_ held

  const int size_;
  const std::chrono::duration<double> timeout_;  // of every blocking wait
  std::mutex mutex_;
  std::condition_variable ranks_cv_;     // op completions, barrier, failures
  std::condition_variable progress_cv_;  // new transfers, shutdown
  std::map<PairKey, PendingOps> pending_;
  std::deque<Transfer> transfers_;
  std::vector<bool> finished_;
  int failed_rank_ = -1;
  int barrier_arrived_ = 0;
  uint64_t barrier_generation_ = 0;
  bool stopping_ = false;
  std::thread progress_thread_;
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(InProcessWorld& world, int rank) : world_(world), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) override;
  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) override;
  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter_sum(const float* send, float* recv, size_t count) override;
  void barrier() override;
  uint64_t bytes_sent() const override { return bytes_sent_; }
  double timeout_seconds() const override { return world_.timeout_seconds(); }

 private:
  std::unique_ptr<CommRequest> post(bool is_send, const void* send_data, void* recv_data,
                                    size_t bytes, int peer, CommChannel channel);

  InProcessWorld& world_;
  const int rank_;
  uint64_t bytes_sent_ = 0;  // read and written by this rank's thread only
};

}  // namespace ringpack
