// The device communicator (see device_communicator.h for the matching, ordering and failure
// rules; the interface is include/ringpack/comm.h). Compiled only with CUDA.
//
// Streams and events, per transfer of `bytes` from rank S to rank R:
//   S's compute stream:  ... | record(ready_S)                 (at S's post)
//   R's compute stream:  ... | record(ready_R)                 (at R's post)
//   R's transfer stream: wait(ready_S) | wait(ready_R) | [mark] | copy | [mark] | record(done)
//                        (enqueued at the match, under the world mutex, by the second poster)
//   S's and R's compute streams: wait(done)                    (in their wait(), after the match)
// Every wait on an event is enqueued after that event's record in host order (the record happens
// before the op is registered under the mutex; the wait after the match is seen under it), so the
// dependencies between the streams form no cycle and a failed run cannot hang the device.
#include "comm/device_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/in_process.h"  // AbortedError, CommChannel
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_events.h"
#include "cuda/elementwise.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

using TransferMarks = std::optional<std::pair<size_t, size_t>>;
using SharedEvent = std::shared_ptr<cuda::PooledEvent>;

const char* op_kind(bool is_send) {
  return is_send ? "isend" : "irecv";
}

// One rank's streams, shared by its communicator and its ops: the compute stream (the backend's,
// not owned) and the transfer stream (owned).
class RankStreams {
 public:
  RankStreams(int rank, int device, cudaStream_t compute)
      : rank_(rank), device_(device), compute_(compute) {
    RINGPACK_CUDA_CHECK(cudaSetDevice(device_));
    int least = 0;
    int greatest = 0;
    RINGPACK_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    RINGPACK_CUDA_CHECK(cudaStreamCreateWithPriority(&transfer_, cudaStreamNonBlocking, greatest));
  }
  ~RankStreams() {
    // No synchronisation: after a failed run copies may still be queued, and CUDA releases a
    // destroyed stream once its work completed.
    cudaSetDevice(device_);
    cudaStreamDestroy(transfer_);
  }
  RankStreams(const RankStreams&) = delete;
  RankStreams& operator=(const RankStreams&) = delete;

  int rank() const { return rank_; }
  int device() const { return device_; }
  cudaStream_t compute() const { return compute_; }
  cudaStream_t transfer() const { return transfer_; }
  void bind() const { RINGPACK_CUDA_CHECK(cudaSetDevice(device_)); }

 private:
  const int rank_;
  const int device_;
  const cudaStream_t compute_;
  cudaStream_t transfer_ = nullptr;
};

// One posted isend or irecv. Guarded by DeviceWorld::mutex_ from the post on.
struct DeviceOp {
  enum class State { kPosted, kMatched, kFailed, kCancelled };
  State state = State::kPosted;
  bool is_send = false;
  int src = 0;  // sending rank
  int dst = 0;  // receiving rank
  CommChannel channel = CommChannel::kPointToPoint;
  const void* send_data = nullptr;  // is_send only
  void* recv_data = nullptr;        // !is_send only
  size_t bytes = 0;
  std::shared_ptr<RankStreams> poster;  // the posting rank's streams
  SharedEvent ready;                    // on the poster's compute stream; dropped at the match
  Timeline* timeline = nullptr;         // irecv: the receiver's timeline at post time
  // From the match on (kMatched):
  SharedEvent done;  // on the receiver's transfer stream, shared by both ops
  TransferMarks marks;
  std::string error;  // kFailed: the message waits throw
};

// What a host wait for a match returns.
struct MatchResult {
  SharedEvent done;
  TransferMarks marks;
};

}  // namespace

class DeviceWorld {
 public:
  DeviceWorld(int size, double timeout_seconds)
      : size_(size),
        timeout_(timeout_seconds),
        attached_(size_t(std::max(size, 0)), false),
        departed_(size_t(std::max(size, 0)), false) {
    RINGPACK_CHECK(timeout_seconds > 0, "communication timeout ", timeout_seconds,
                   " s must be positive");
    RINGPACK_CHECK(size >= 1, "device world size ", size, " is invalid: use at least 1 rank");
  }
  DeviceWorld(const DeviceWorld&) = delete;
  DeviceWorld& operator=(const DeviceWorld&) = delete;

  int size() const { return size_; }
  double timeout_seconds() const { return timeout_.count(); }

  // Registers the communicator of `rank` on `device` (every rank of a world shares one device);
  // returns the world's event pool, created by the first rank.
  cuda::EventPool& attach(int rank, int device);
  // Registers op; when the other side of (src, dst, channel) has an unmatched op, the oldest one
  // matches it and the transfer is enqueued. Throws on a failed world and on unequal sizes.
  void post(const std::shared_ptr<DeviceOp>& op, int self);
  // Blocks the host until op is matched (the peer posted) and returns its done event; throws
  // on the deadline, op's error, a failed world, or a peer that departed without posting.
  MatchResult await_match(DeviceOp& op, int self);
  // A request dies: an unmatched op is withdrawn (nullptr), a matched one returns its done event.
  SharedEvent release(DeviceOp& op) noexcept;
  // Host barrier of the ranks, with the deadline.
  void barrier(int self);

  void mark_failed(int rank) noexcept;
  void mark_departed(int rank) noexcept;
  // Throws AbortedError when the world was marked failed; never blocks for long.
  void check_failed(int self);

 private:
  using PairKey = std::tuple<int, int, CommChannel>;  // (src, dst, channel)
  struct PendingOps {
    std::deque<std::shared_ptr<DeviceOp>> sends;
    std::deque<std::shared_ptr<DeviceOp>> recvs;
  };

  void enqueue_transfer(DeviceOp& send, DeviceOp& recv);  // mutex_ held
  [[noreturn]] void throw_aborted(int self) const;        // mutex_ held

  const int size_;
  const std::chrono::duration<double> timeout_;  // of every host wait
  std::mutex mutex_;
  std::condition_variable cv_;  // matches, barrier, failures, departures
  int device_ = -1;
  // Declared before the pending ops: they hold events of the pool and are destroyed first.
  std::unique_ptr<cuda::EventPool> pool_;
  std::map<PairKey, PendingOps> pending_;
  std::vector<bool> attached_;
  std::vector<bool> departed_;
  int failed_rank_ = -1;
  int barrier_arrived_ = 0;
  uint64_t barrier_generation_ = 0;
};

cuda::EventPool& DeviceWorld::attach(int rank, int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  RINGPACK_CHECK(rank >= 0 && rank < size_, "device communicator rank ", rank,
                 " is out of range: the world has ", size_, " ranks");
  RINGPACK_CHECK(!attached_[size_t(rank)], "rank ", rank,
                 " already has a device communicator in this world: make one per rank");
  if (device_ < 0) {
    device_ = device;
    pool_ = std::make_unique<cuda::EventPool>(device);
  }
  RINGPACK_CHECK(device == device_, "rank ", rank, " runs on CUDA device ", device,
                 " but the other ranks of its device world run on device ", device_,
                 ": the device communicator runs virtual ranks of one GPU (use --comm nccl "
                 "across GPUs)");
  attached_[size_t(rank)] = true;
  return *pool_;
}

void DeviceWorld::throw_aborted(int self) const {
  if (failed_rank_ == self) {
    throw AbortedError(detail::concat("rank ", self,
                                      ": the device communicator was aborted after a failure of "
                                      "this rank"),
                       detail::error_location("", __FILE__, __LINE__));
  }
  throw AbortedError(detail::concat("rank ", self, ": aborted: rank ", failed_rank_, " failed"),
                     detail::error_location("", __FILE__, __LINE__));
}

void DeviceWorld::post(const std::shared_ptr<DeviceOp>& op, int self) {
  using State = DeviceOp::State;
  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_rank_ >= 0) throw_aborted(self);
  PendingOps& pending = pending_[PairKey{op->src, op->dst, op->channel}];
  auto& mine = op->is_send ? pending.sends : pending.recvs;
  auto& theirs = op->is_send ? pending.recvs : pending.sends;
  if (theirs.empty()) {
    mine.push_back(op);
    return;
  }
  const std::shared_ptr<DeviceOp> match = std::move(theirs.front());
  theirs.pop_front();
  DeviceOp& send = op->is_send ? *op : *match;
  DeviceOp& recv = op->is_send ? *match : *op;
  const auto fail_both = [&](const std::string& message) {
    for (DeviceOp* failed : {&send, &recv}) {
      failed->state = State::kFailed;
      failed->error = message;
      failed->ready.reset();
    }
    lock.unlock();
    cv_.notify_all();
  };
  if (send.bytes != recv.bytes) {
    const std::string message = detail::concat(
        "isend of ", send.bytes, " bytes from rank ", send.src, " matched irecv of ", recv.bytes,
        " bytes on rank ", recv.dst,
        ": matched messages must have equal sizes (check the order of posts between the ranks)");
    fail_both(message);
    RINGPACK_FAIL(message);
  }
  try {
    enqueue_transfer(send, recv);
  } catch (const std::exception& e) {
    fail_both(detail::concat("the transfer of ", send.bytes, " bytes from rank ", send.src,
                             " to rank ", recv.dst, " could not be enqueued: ", e.what()));
    throw;
  }
  lock.unlock();
  cv_.notify_all();
}

void DeviceWorld::enqueue_transfer(DeviceOp& send, DeviceOp& recv) {
  using State = DeviceOp::State;
  const RankStreams& receiver = *recv.poster;
  receiver.bind();
  const cudaStream_t stream = receiver.transfer();
  // The copy reads finished data and overwrites a buffer that no queued work still reads.
  RINGPACK_CUDA_CHECK(cudaStreamWaitEvent(stream, send.ready->get(), 0));
  if (recv.ready != send.ready)
    RINGPACK_CUDA_CHECK(cudaStreamWaitEvent(stream, recv.ready->get(), 0));
  std::optional<size_t> start;
  if (recv.timeline != nullptr) start = recv.timeline->mark(stream);
  if (send.bytes > 0) {
    RINGPACK_CUDA_CHECK(cudaMemcpyAsync(recv.recv_data, send.send_data, send.bytes,
                                        cudaMemcpyDeviceToDevice, stream));
  }
  TransferMarks marks;
  if (start) marks = std::make_pair(*start, recv.timeline->mark(stream));
  auto done = std::make_shared<cuda::PooledEvent>(*pool_);
  RINGPACK_CUDA_CHECK(cudaEventRecord(done->get(), stream));
  // The waits above captured the ready events: they may go back to the pool.
  for (DeviceOp* matched : {&send, &recv}) {
    matched->state = State::kMatched;
    matched->done = done;
    matched->ready.reset();
  }
  recv.marks = marks;
}

MatchResult DeviceWorld::await_match(DeviceOp& op, int self) {
  using State = DeviceOp::State;
  const int peer = op.is_send ? op.dst : op.src;
  std::unique_lock<std::mutex> lock(mutex_);
  const bool settled = cv_.wait_for(lock, timeout_, [&] {
    return op.state != State::kPosted || failed_rank_ >= 0 || departed_[size_t(peer)];
  });
  if (op.state == State::kMatched) return MatchResult{op.done, op.marks};
  if (op.state == State::kFailed) RINGPACK_FAIL(op.error);
  RINGPACK_CHECK(op.state == State::kPosted, "internal: rank ", self, " waits on a withdrawn ",
                 op_kind(op.is_send));
  if (failed_rank_ >= 0) throw_aborted(self);
  RINGPACK_CHECK(settled, "rank ", self, ": the ", op_kind(op.is_send), " of ", op.bytes, " bytes ",
                 (op.is_send ? "to" : "from"), " rank ", peer, " was not matched within ",
                 timeout_.count(), " s (--comm-timeout): rank ", peer,
                 " may hang or wait elsewhere");
  RINGPACK_FAIL("rank ", peer, " returned without posting the ", op_kind(!op.is_send),
                " matching this ", op_kind(op.is_send), " of ", op.bytes, " bytes of rank ", self,
                ": every isend needs an irecv on the peer, in the same order");
}

SharedEvent DeviceWorld::release(DeviceOp& op) noexcept {
  using State = DeviceOp::State;
  std::lock_guard<std::mutex> lock(mutex_);
  if (op.state == State::kPosted) {
    const auto it = pending_.find(PairKey{op.src, op.dst, op.channel});
    if (it != pending_.end()) {
      auto& mine = op.is_send ? it->second.sends : it->second.recvs;
      const auto found =
          std::find_if(mine.begin(), mine.end(),
                       [&](const std::shared_ptr<DeviceOp>& p) { return p.get() == &op; });
      if (found != mine.end()) mine.erase(found);
    }
    op.state = State::kCancelled;
    op.ready.reset();
    return nullptr;
  }
  return op.state == State::kMatched ? op.done : nullptr;
}

void DeviceWorld::barrier(int self) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (failed_rank_ >= 0) throw_aborted(self);
  if (++barrier_arrived_ == size_) {
    barrier_arrived_ = 0;
    ++barrier_generation_;
    lock.unlock();
    cv_.notify_all();
    return;
  }
  const uint64_t generation = barrier_generation_;
  const auto any_departed = [&] {
    return std::find(departed_.begin(), departed_.end(), true) != departed_.end();
  };
  const bool settled = cv_.wait_for(lock, timeout_, [&] {
    return barrier_generation_ != generation || failed_rank_ >= 0 || any_departed();
  });
  if (barrier_generation_ != generation) return;
  if (failed_rank_ >= 0) throw_aborted(self);
  RINGPACK_CHECK(settled, "rank ", self, ": the barrier did not complete within ", timeout_.count(),
                 " s (--comm-timeout): some rank never reached it");
  const auto departed = std::find(departed_.begin(), departed_.end(), true) - departed_.begin();
  RINGPACK_FAIL("rank ", departed, " returned without reaching the barrier rank ", self,
                " waits in: every rank must call the same collectives");
}

void DeviceWorld::mark_failed(int rank) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_rank_ < 0) failed_rank_ = rank;
  }
  cv_.notify_all();
}

void DeviceWorld::mark_departed(int rank) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank >= 0 && rank < size_) departed_[size_t(rank)] = true;
  }
  cv_.notify_all();
}

void DeviceWorld::check_failed(int self) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_rank_ >= 0) throw_aborted(self);
}

namespace {

// The ops of one call (isend, irecv, exchange, or a collective's) as one request.
class DeviceRequest final : public CommRequest {
 public:
  DeviceRequest(std::shared_ptr<DeviceWorld> world, std::shared_ptr<RankStreams> streams)
      : world_(std::move(world)), streams_(std::move(streams)) {}
  ~DeviceRequest() override {
    for (Entry& entry : entries_) {
      const SharedEvent done = world_->release(*entry.op);
      // Not waited on: later compute-stream work (a stream-ordered free of the buffer) must
      // still follow the copy. A stream-ordered wait, never a host one.
      if (done && !entry.waited) {
        cudaSetDevice(streams_->device());
        cudaStreamWaitEvent(streams_->compute(), done->get(), 0);
      }
    }
  }
  DeviceRequest(const DeviceRequest&) = delete;
  DeviceRequest& operator=(const DeviceRequest&) = delete;

  // `carries_marks`: the op whose transfer marks marks() returns (a receive).
  void add(std::shared_ptr<DeviceOp> op, bool carries_marks = false) {
    if (carries_marks) marks_op_ = op.get();
    entries_.push_back(Entry{std::move(op), false});
  }

  void wait() override {
    for (Entry& entry : entries_) {
      if (entry.waited) continue;
      const MatchResult match = world_->await_match(*entry.op, streams_->rank());
      streams_->bind();
      RINGPACK_CUDA_CHECK(cudaStreamWaitEvent(streams_->compute(), match.done->get(), 0));
      entry.waited = true;
    }
  }

  TransferMarks marks() const override {
    if (marks_op_ == nullptr || marks_op_->timeline == nullptr) return std::nullopt;
    return world_->await_match(*marks_op_, streams_->rank()).marks;
  }

 private:
  struct Entry {
    std::shared_ptr<DeviceOp> op;
    bool waited = false;
  };

  // Declared first: the ops (which hold events of the world's pool) die before the world.
  std::shared_ptr<DeviceWorld> world_;
  std::shared_ptr<RankStreams> streams_;
  std::vector<Entry> entries_;
  DeviceOp* marks_op_ = nullptr;  // one of entries_
};

// Scratch memory of the backend (stream-ordered), freed on scope exit.
class Scratch {
 public:
  Scratch(AttentionBackend& backend, size_t bytes)
      : backend_(backend), data_(bytes > 0 ? backend.allocate(bytes) : nullptr) {}
  ~Scratch() {
    if (data_ == nullptr) return;
    try {
      backend_.deallocate(data_);
    } catch (...) {  // a destructor must not throw; the error resurfaces at the next check
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return static_cast<float*>(data_); }

 private:
  AttentionBackend& backend_;
  void* data_;
};

class DeviceCommunicator final : public Communicator {
 public:
  DeviceCommunicator(std::shared_ptr<DeviceWorld> world, int rank, AttentionBackend& backend)
      : world_(std::move(world)), rank_(rank), backend_(backend) {
    RINGPACK_CHECK(world_ != nullptr, "make_device_communicator needs a world (make_device_world)");
    RINGPACK_CHECK(backend.memory_space() == MemorySpace::kDevice && backend.stream() != nullptr,
                   "the device communicator needs a CUDA backend (--backend cuda), got backend '",
                   backend.name(), "': its stream() is the rank's compute stream");
    const auto compute = static_cast<cudaStream_t>(backend.stream());
    int device = -1;
    RINGPACK_CUDA_CHECK(cudaStreamGetDevice(compute, &device));
    streams_ = std::make_shared<RankStreams>(rank, device, compute);
    pool_ = &world_->attach(rank, device);
  }

  ~DeviceCommunicator() override { world_->mark_departed(rank_); }

  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) override {
    const SharedEvent ready = record_ready();
    auto request = std::make_unique<DeviceRequest>(world_, streams_);
    request->add(post(true, data, nullptr, bytes, peer, CommChannel::kPointToPoint, ready));
    return request;
  }

  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) override {
    const SharedEvent ready = record_ready();
    auto request = std::make_unique<DeviceRequest>(world_, streams_);
    request->add(post(false, nullptr, data, bytes, peer, CommChannel::kPointToPoint, ready),
                 /*carries_marks=*/true);
    return request;
  }

  // One ready event for both halves; marks() are the receive's.
  std::unique_ptr<CommRequest> exchange(const void* send, int dst, void* recv, int src,
                                        size_t bytes) override {
    const SharedEvent ready = record_ready();
    auto request = std::make_unique<DeviceRequest>(world_, streams_);
    request->add(post(false, nullptr, recv, bytes, src, CommChannel::kPointToPoint, ready),
                 /*carries_marks=*/true);
    request->add(post(true, send, nullptr, bytes, dst, CommChannel::kPointToPoint, ready));
    return request;
  }

  void all_gather(const void* send, void* recv, size_t bytes) override {
    RINGPACK_CHECK(bytes == 0 || (send != nullptr && recv != nullptr), "all_gather of ", bytes,
                   " bytes got a null buffer");
    auto* gathered = static_cast<std::byte*>(recv);  // [size][bytes]
    std::byte* mine = gathered + size_t(rank_) * bytes;
    streams_->bind();
    if (bytes > 0 && mine != send) {
      RINGPACK_CUDA_CHECK(
          cudaMemcpyAsync(mine, send, bytes, cudaMemcpyDeviceToDevice, streams_->compute()));
    }
    const SharedEvent ready = record_ready();
    DeviceRequest request(world_, streams_);
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank_) continue;
      request.add(post(false, nullptr, gathered + size_t(peer) * bytes, bytes, peer,
                       CommChannel::kCollective, ready));
      request.add(post(true, send, nullptr, bytes, peer, CommChannel::kCollective, ready));
    }
    request.wait();
  }

  void reduce_scatter_sum(const float* send, float* recv, size_t count) override {
    RINGPACK_CHECK(count == 0 || (send != nullptr && recv != nullptr), "reduce_scatter_sum of ",
                   count, " floats got a null buffer");
    const size_t chunk_bytes = count * sizeof(float);
    // gathered[p] = rank p's send[rank_]; allocated before the ready event, which then covers
    // the allocation for the copies of the transfer stream. Declared before the request: freed
    // (stream-ordered) after the request made the compute stream wait on every copy.
    const Scratch gathered(backend_, size() > 1 ? size_t(size()) * chunk_bytes : 0);
    const SharedEvent ready = record_ready();
    DeviceRequest request(world_, streams_);
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank_) continue;
      request.add(post(false, nullptr, gathered.data() + size_t(peer) * count, chunk_bytes, peer,
                       CommChannel::kCollective, ready));
      request.add(post(true, send + size_t(peer) * count, nullptr, chunk_bytes, peer,
                       CommChannel::kCollective, ready));
    }
    request.wait();
    if (count == 0) return;
    // Rank order on every rank (chunk 0, then + chunk 1, + chunk 2, ...): the result does not
    // depend on which rank computes it.
    const auto chunk = [&](int p) -> const float* {
      return p == rank_ ? send + size_t(rank_) * count : gathered.data() + size_t(p) * count;
    };
    streams_->bind();
    RINGPACK_CUDA_CHECK(cudaMemcpyAsync(recv, chunk(0), chunk_bytes, cudaMemcpyDeviceToDevice,
                                        streams_->compute()));
    for (int p = 1; p < size(); ++p) cuda::accumulate(recv, chunk(p), count, streams_->compute());
  }

  void barrier() override {
    world_->barrier(rank_);
    // Every transfer into this rank posted before the barrier is on the transfer stream now.
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds());
    auto pause = std::chrono::microseconds(20);
    streams_->bind();
    while (true) {
      const cudaError_t status = cudaStreamQuery(streams_->transfer());
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) RINGPACK_CUDA_CHECK(status);
      world_->check_failed(rank_);
      RINGPACK_CHECK(Clock::now() < deadline, "rank ", rank_,
                     ": the transfers before the barrier did not finish within ", timeout_seconds(),
                     " s (--comm-timeout)");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(50));
    }
    world_->barrier(rank_);
  }

  uint64_t bytes_sent() const override { return bytes_sent_; }
  void* stream() const override { return streams_->transfer(); }
  double timeout_seconds() const override { return world_->timeout_seconds(); }

  void check_failures() override {
    world_->check_failed(rank_);
    streams_->bind();
    const cudaError_t status = cudaStreamQuery(streams_->transfer());
    RINGPACK_CHECK(
        status == cudaSuccess || status == cudaErrorNotReady, "rank ", rank_,
        ": a transfer of the device communicator failed: CUDA error: ", cudaGetErrorString(status));
  }

  void abort() override { world_->mark_failed(rank_); }

  void set_timeline(Timeline* timeline) override { timeline_ = timeline; }

 private:
  // An event after everything enqueued so far on the compute stream.
  SharedEvent record_ready() {
    streams_->bind();
    auto ready = std::make_shared<cuda::PooledEvent>(*pool_);
    RINGPACK_CUDA_CHECK(cudaEventRecord(ready->get(), streams_->compute()));
    return ready;
  }

  std::shared_ptr<DeviceOp> post(bool is_send, const void* send_data, void* recv_data, size_t bytes,
                                 int peer, CommChannel channel, const SharedEvent& ready) {
    RINGPACK_CHECK(peer >= 0 && peer < size(), op_kind(is_send), " peer ", peer,
                   " is out of range: use a rank in [0, ", size(), ")");
    RINGPACK_CHECK(bytes == 0 || (is_send ? send_data != nullptr : recv_data != nullptr),
                   op_kind(is_send), " of ", bytes, " bytes got a null buffer");
    auto op = std::make_shared<DeviceOp>();
    op->is_send = is_send;
    op->src = is_send ? rank_ : peer;
    op->dst = is_send ? peer : rank_;
    op->channel = channel;
    op->send_data = send_data;
    op->recv_data = recv_data;
    op->bytes = bytes;
    op->poster = streams_;
    op->ready = ready;
    op->timeline = is_send ? nullptr : timeline_;
    world_->post(op, rank_);
    if (is_send) bytes_sent_ += bytes;
    return op;
  }

  std::shared_ptr<DeviceWorld> world_;
  const int rank_;
  AttentionBackend& backend_;
  std::shared_ptr<RankStreams> streams_;
  cuda::EventPool* pool_ = nullptr;  // the world's
  Timeline* timeline_ = nullptr;     // set_timeline; read by this rank's thread only
  uint64_t bytes_sent_ = 0;          // read and written by this rank's thread only
};

}  // namespace

std::shared_ptr<DeviceWorld> make_device_world(int size, double timeout_seconds) {
  return std::make_shared<DeviceWorld>(size, timeout_seconds);
}

std::unique_ptr<Communicator> make_device_communicator(std::shared_ptr<DeviceWorld> world, int rank,
                                                       AttentionBackend& backend) {
  return std::make_unique<DeviceCommunicator>(std::move(world), rank, backend);
}

}  // namespace ringpack
