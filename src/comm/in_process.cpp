// The in-process communicator and run_in_process (see in_process.h for the matching, progress
// and failure rules; the interface is include/ringpack/comm.h).
#include "comm/in_process.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <system_error>
#include <utility>

namespace ringpack {
namespace {

const char* op_kind(bool is_send) {
  return is_send ? "isend" : "irecv";
}

class InProcessRequest : public CommRequest {
 public:
  InProcessRequest(InProcessWorld& world, std::shared_ptr<CommOp> op)
      : world_(world), op_(std::move(op)) {}
  ~InProcessRequest() override { world_.release(op_); }
  InProcessRequest(const InProcessRequest&) = delete;
  InProcessRequest& operator=(const InProcessRequest&) = delete;

  void wait() override { world_.wait(op_); }

 private:
  InProcessWorld& world_;
  std::shared_ptr<CommOp> op_;
};

}  // namespace

// ---- InProcessWorld ---------------------------------------------------------------------------

InProcessWorld::InProcessWorld(int size, double timeout_seconds)
    : size_(size), timeout_(timeout_seconds), finished_(size_t(size), false) {
  RINGPACK_CHECK(timeout_seconds > 0, "communication timeout ", timeout_seconds,
                 " s must be positive");
  RINGPACK_CHECK(size >= 1, "in-process world size ", size, " is invalid: use at least 1 rank");
  try {
    progress_thread_ = std::thread([this] { progress_loop(); });
  } catch (const std::system_error& e) {
    RINGPACK_FAIL("could not start the communicator's progress thread (", e.what(),
                  "): raise the process's thread or memory limit");
  }
}

InProcessWorld::~InProcessWorld() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  progress_cv_.notify_all();
  progress_thread_.join();
}

void InProcessWorld::throw_aborted() const {
  throw AbortedError(
      detail::concat("aborted: rank ", failed_rank_, " failed (run_in_process rethrows its error)"),
      detail::error_location("", __FILE__, __LINE__));
}

std::shared_ptr<CommOp> InProcessWorld::post(bool is_send, int self, int peer, CommChannel channel,
                                             const void* send_data, void* recv_data, size_t bytes) {
  auto op = std::make_shared<CommOp>();
  op->is_send = is_send;
  op->src = is_send ? self : peer;
  op->dst = is_send ? peer : self;
  op->channel = channel;
  op->send_data = send_data;
  op->recv_data = recv_data;
  op->bytes = bytes;

  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_rank_ >= 0) throw_aborted();
  PendingOps& pending = pending_[PairKey{op->src, op->dst, channel}];
  auto& mine = is_send ? pending.sends : pending.recvs;
  auto& theirs = is_send ? pending.recvs : pending.sends;
  if (theirs.empty()) {
    mine.push_back(op);
    return op;
  }
  std::shared_ptr<CommOp> match = std::move(theirs.front());
  theirs.pop_front();
  const std::shared_ptr<CommOp>& send = is_send ? op : match;
  const std::shared_ptr<CommOp>& recv = is_send ? match : op;
  if (send->bytes != recv->bytes) {
    const std::string message = detail::concat(
        "isend of ", send->bytes, " bytes from rank ", send->src, " matched irecv of ", recv->bytes,
        " bytes on rank ", recv->dst,
        ": matched messages must have equal sizes (check the order of posts between the ranks)");
    match->state = CommOp::State::kFailed;
    match->error = message;
    lock.unlock();
    ranks_cv_.notify_all();
    RINGPACK_FAIL(message);
  }
  send->state = CommOp::State::kQueued;
  recv->state = CommOp::State::kQueued;
  transfers_.push_back(Transfer{send, recv});
  lock.unlock();
  progress_cv_.notify_one();
  return op;
}

void InProcessWorld::wait(const std::shared_ptr<CommOp>& op) {
  using State = CommOp::State;
  const int peer = op->is_send ? op->dst : op->src;
  std::unique_lock<std::mutex> lock(mutex_);
  const bool settled = ranks_cv_.wait_for(lock, timeout_, [&] {
    return op->state == State::kDone || op->state == State::kFailed || failed_rank_ >= 0 ||
           (op->state == State::kPosted && finished_[size_t(peer)]);
  });
  RINGPACK_CHECK(settled, "rank ", (op->is_send ? op->src : op->dst), ": the ",
                 op_kind(op->is_send), " of ", op->bytes, " bytes with rank ", peer,
                 " did not complete within ", timeout_.count(), " s (--comm-timeout): rank ", peer,
                 " may hang or wait elsewhere");
  if (op->state == State::kDone) return;
  if (op->state == State::kFailed) RINGPACK_FAIL(op->error);
  if (failed_rank_ >= 0) throw_aborted();
  RINGPACK_FAIL("rank ", peer, " returned without posting the ", op_kind(!op->is_send),
                " matching this ", op_kind(op->is_send), " of ", op->bytes,
                " bytes: every isend needs an irecv on the peer, in the same order");
}

void InProcessWorld::release(const std::shared_ptr<CommOp>& op) {
  using State = CommOp::State;
  std::unique_lock<std::mutex> lock(mutex_);
  if (op->state == State::kPosted) {
    PendingOps& pending = pending_[PairKey{op->src, op->dst, op->channel}];
    auto& mine = op->is_send ? pending.sends : pending.recvs;
    mine.erase(std::find(mine.begin(), mine.end(), op));
    op->state = State::kCancelled;
    return;
  }
  // A matched transfer always completes on the progress thread; its buffers must outlive it.
  ranks_cv_.wait(lock, [&] { return op->state != State::kQueued && op->state != State::kCopying; });
}

void InProcessWorld::barrier(int self) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_rank_ >= 0) throw_aborted();
  if (++barrier_arrived_ == size_) {
    barrier_arrived_ = 0;
    ++barrier_generation_;
    lock.unlock();
    ranks_cv_.notify_all();
    return;
  }
  const uint64_t generation = barrier_generation_;
  const auto any_finished = [&] {
    return std::find(finished_.begin(), finished_.end(), true) != finished_.end();
  };
  const bool settled = ranks_cv_.wait_for(lock, timeout_, [&] {
    return barrier_generation_ != generation || failed_rank_ >= 0 || any_finished();
  });
  RINGPACK_CHECK(settled, "rank ", self, ": the barrier did not complete within ", timeout_.count(),
                 " s (--comm-timeout): some rank never reached it");
  if (barrier_generation_ != generation) return;
  if (failed_rank_ >= 0) throw_aborted();
  const auto finished = std::find(finished_.begin(), finished_.end(), true) - finished_.begin();
  RINGPACK_FAIL("rank ", finished, " returned without reaching the barrier rank ", self,
                " waits in: every rank must call the same collectives");
}

void InProcessWorld::mark_failed(int rank) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_rank_ < 0) failed_rank_ = rank;
  }
  ranks_cv_.notify_all();
}

void InProcessWorld::mark_finished(int rank) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_[size_t(rank)] = true;
  }
  ranks_cv_.notify_all();
}

void InProcessWorld::progress_loop() {
  using State = CommOp::State;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    progress_cv_.wait(lock, [&] { return stopping_ || !transfers_.empty(); });
    if (transfers_.empty()) return;  // stopping, nothing left
    Transfer transfer = std::move(transfers_.front());
    transfers_.pop_front();
    transfer.send->state = State::kCopying;
    transfer.recv->state = State::kCopying;
    lock.unlock();
    if (transfer.send->bytes > 0) {
      std::memcpy(transfer.recv->recv_data, transfer.send->send_data, transfer.send->bytes);
    }
    lock.lock();
    transfer.send->state = State::kDone;
    transfer.recv->state = State::kDone;
    ranks_cv_.notify_all();
  }
}

// ---- InProcessCommunicator --------------------------------------------------------------------

std::unique_ptr<CommRequest> InProcessCommunicator::post(bool is_send, const void* send_data,
                                                         void* recv_data, size_t bytes, int peer,
                                                         CommChannel channel) {
  RINGPACK_CHECK(peer >= 0 && peer < size(), op_kind(is_send), " peer ", peer,
                 " is out of range: use a rank in [0, ", size(), ")");
  RINGPACK_CHECK(bytes == 0 || (is_send ? send_data != nullptr : recv_data != nullptr),
                 op_kind(is_send), " of ", bytes, " bytes got a null buffer");
  auto op = world_.post(is_send, rank_, peer, channel, send_data, recv_data, bytes);
  if (is_send) bytes_sent_ += bytes;
  return std::make_unique<InProcessRequest>(world_, std::move(op));
}

std::unique_ptr<CommRequest> InProcessCommunicator::isend(const void* data, size_t bytes,
                                                          int peer) {
  return post(true, data, nullptr, bytes, peer, CommChannel::kPointToPoint);
}

std::unique_ptr<CommRequest> InProcessCommunicator::irecv(void* data, size_t bytes, int peer) {
  return post(false, nullptr, data, bytes, peer, CommChannel::kPointToPoint);
}

void InProcessCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  auto* gathered = static_cast<std::byte*>(recv);  // [size][bytes]
  if (bytes > 0) std::memcpy(gathered + size_t(rank_) * bytes, send, bytes);
  std::vector<std::unique_ptr<CommRequest>> requests;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    requests.push_back(post(false, nullptr, gathered + size_t(peer) * bytes, bytes, peer,
                            CommChannel::kCollective));
    requests.push_back(post(true, send, nullptr, bytes, peer, CommChannel::kCollective));
  }
  for (auto& request : requests) request->wait();
}

void InProcessCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t count) {
  // gathered[p] = rank p's send[rank_]: [size][count]
  std::vector<float> gathered(size_t(size()) * count);
  const size_t chunk_bytes = count * sizeof(float);
  if (count > 0)
    std::memcpy(gathered.data() + size_t(rank_) * count, send + size_t(rank_) * count, chunk_bytes);
  std::vector<std::unique_ptr<CommRequest>> requests;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    requests.push_back(post(false, nullptr, gathered.data() + size_t(peer) * count, chunk_bytes,
                            peer, CommChannel::kCollective));
    requests.push_back(post(true, send + size_t(peer) * count, nullptr, chunk_bytes, peer,
                            CommChannel::kCollective));
  }
  for (auto& request : requests) request->wait();
  // Sum in rank order on every rank, so the result does not depend on arrival order.
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int p = 0; p < size(); ++p) sum += gathered[size_t(p) * count + i];
    recv[i] = sum;
  }
}

void InProcessCommunicator::barrier() {
  world_.barrier(rank_);
}

// ---- run_in_process ---------------------------------------------------------------------------

void run_in_process(int size, const std::function<void(Communicator&)>& fn,
                    double timeout_seconds) {
  RINGPACK_CHECK(size >= 1, "run_in_process size ", size, " is invalid: use at least 1 rank");
  InProcessWorld world(size, timeout_seconds);
  std::mutex failures_mutex;
  std::exception_ptr first_error;    // the first exception that is not an abort
  std::exception_ptr first_aborted;  // used only when every failure was an abort
  const auto record = [&](std::exception_ptr error, bool aborted) {
    std::lock_guard<std::mutex> lock(failures_mutex);
    std::exception_ptr& slot = aborted ? first_aborted : first_error;
    if (!slot) slot = std::move(error);
  };

  std::vector<std::thread> threads;
  threads.reserve(size_t(size));
  for (int rank = 0; rank < size; ++rank) {
    try {
      threads.emplace_back([&, rank] {
        detail::set_current_rank(rank);
        InProcessCommunicator comm(world, rank);
        try {
          fn(comm);
          world.mark_finished(rank);
        } catch (const AbortedError&) {
          record(std::current_exception(), true);
          world.mark_failed(rank);
        } catch (...) {
          record(std::current_exception(), false);
          world.mark_failed(rank);
        }
        detail::set_current_rank(-1);
      });
    } catch (const std::system_error& e) {
      // The ranks already started wait for this one: fail it so that they stop, then join them.
      world.mark_failed(rank);
      for (auto& thread : threads) thread.join();
      RINGPACK_FAIL("could not start the thread of rank ", rank, " of ", size, " (", e.what(),
                    "): pass a smaller --cp, or raise the process's thread or memory limit");
    }
  }
  for (auto& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
  if (first_aborted) std::rethrow_exception(first_aborted);
}

}  // namespace ringpack
