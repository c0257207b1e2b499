// The NCCL communicator (see nccl_communicator.h for the ordering, failure and device rules; the
// interface is include/ringpack/comm.h). Compiled only with NCCL.
//
// Per transfer, in host order:
//   compute stream:   ... | record(ready)
//   transfer stream:  wait(ready) | [mark] | NCCL group | [mark] | record(done)
//   compute stream:   wait(done)                      (CommRequest::wait, or the collective)
// The marks and `done` are enqueued only once the group's kernels are on the transfer stream:
// a non-blocking ncclGroupEnd may return ncclInProgress (the first transfer to a peer connects
// in the background) and the stream is not touched again until ncclCommGetAsyncError says the
// call finished.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/nccl_check.h"
#include "comm/rendezvous.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_events.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "ncclUniqueId changed size");

using Clock = std::chrono::steady_clock;
using TransferMarks = std::optional<std::pair<size_t, size_t>>;

Clock::time_point deadline_after(double seconds) {
  constexpr double kMaxSeconds = 1e7;  // a huge --comm-timeout must not overflow the clock
  const std::chrono::duration<double> timeout(std::min(seconds, kMaxSeconds));
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
}

// Pauses of a polling loop: short at first (a call that finishes at once costs little), then
// up to 1 ms.
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(50));
  }

 private:
  std::chrono::microseconds pause_{10};
};

// NCCL_VERSION_CODE as "2.28.9".
std::string nccl_version_text(int code) {
  constexpr int kMajor = 10000;
  constexpr int kMinor = 100;
  return detail::concat(code / kMajor, ".", code % kMajor / kMinor, ".", code % kMinor);
}

// The device of the backend's compute stream.
int backend_device(const AttentionBackend& backend) {
  RINGPACK_CHECK(backend.memory_space() == MemorySpace::kDevice && backend.stream() != nullptr,
                 "the nccl communicator moves device memory between GPUs: it needs --backend "
                 "cuda, not '",
                 backend.name(), "'");
  int device = -1;
  RINGPACK_CUDA_CHECK(cudaStreamGetDevice(static_cast<cudaStream_t>(backend.stream()), &device));
  return device;
}

// What a rank tells rank 0 at the rendezvous: which GPU of which host (as NCCL tells hosts
// apart: NCCL_HOSTID when set, else host name and boot id) it drives, and its NCCL.
struct GpuIdentity {
  std::string host_key;
  std::string host_name;
  std::string bus_id;
  int device = -1;
  int nccl_version = 0;
};

constexpr char kFieldSeparator = '\n';

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), kFieldSeparator, ' ');
  return text;
}

std::string encode(const GpuIdentity& id) {
  return detail::concat(one_line(id.host_key), kFieldSeparator, one_line(id.host_name),
                        kFieldSeparator, one_line(id.bus_id), kFieldSeparator, id.device,
                        kFieldSeparator, id.nccl_version);
}

std::optional<GpuIdentity> decode(const std::string& text) {
  std::vector<std::string> fields(1);
  for (const char c : text) {
    if (c == kFieldSeparator) {
      fields.emplace_back();
    } else {
      fields.back().push_back(c);
    }
  }
  constexpr size_t kFields = 5;
  if (fields.size() != kFields) return std::nullopt;
  GpuIdentity id;
  id.host_key = fields[0];
  id.host_name = fields[1];
  id.bus_id = fields[2];
  id.device = std::atoi(fields[3].c_str());
  id.nccl_version = std::atoi(fields[4].c_str());
  return id;
}

GpuIdentity local_identity(int device) {
  GpuIdentity id;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  id.host_name = host;
  const char* host_id = std::getenv("NCCL_HOSTID");
  if (host_id != nullptr && *host_id != '\0') {
    id.host_key = std::string("NCCL_HOSTID=") + host_id;
  } else {
    std::ifstream boot_file("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    std::getline(boot_file, boot_id);
    id.host_key = id.host_name + "/" + boot_id;
  }
  char bus_id[64] = {};
  RINGPACK_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, device));
  id.bus_id = bus_id;
  id.device = device;
  RINGPACK_NCCL_CHECK(ncclGetVersion(&id.nccl_version), -1);
  return id;
}

// Rank 0's verdict on the identities of all ranks: "" when NCCL will accept them.
std::string check_identities(const std::vector<std::string>& encoded) {
  std::vector<GpuIdentity> ids;
  for (size_t r = 0; r < encoded.size(); ++r) {
    const std::optional<GpuIdentity> id = decode(encoded[r]);
    if (!id) {
      return detail::concat("rank 0: rank ", r,
                            " sent an unreadable GPU description to the rendezvous: every rank "
                            "must run the same ringpack build");
    }
    ids.push_back(*id);
  }
  for (size_t r = 1; r < ids.size(); ++r) {
    if (ids[r].nccl_version != ids[0].nccl_version) {
      return detail::concat("rank ", r, " runs NCCL ", nccl_version_text(ids[r].nccl_version),
                            ", rank 0 NCCL ", nccl_version_text(ids[0].nccl_version),
                            ": every rank needs the same NCCL library");
    }
  }
  for (size_t r = 0; r < ids.size(); ++r) {
    std::vector<int> sharing{int(r)};
    for (size_t other = r + 1; other < ids.size(); ++other) {
      if (ids[other].host_key == ids[r].host_key && ids[other].bus_id == ids[r].bus_id) {
        sharing.push_back(int(other));
      }
    }
    if (sharing.size() == 1) continue;
    const bool same_host_id = ids[r].host_key.rfind("NCCL_HOSTID=", 0) == 0;
    return detail::concat(
        sharing.size(), " ranks on 1 GPU: ranks ", rank_list(sharing), " drive GPU ", ids[r].bus_id,
        " (CUDA device ", ids[r].device, ") of host ", ids[r].host_name,
        same_host_id ? " with the same NCCL_HOSTID" : "",
        ": NCCL refuses several ranks per GPU (\"Duplicate GPU detected\"); start at most one "
        "rank per GPU, or, for tests, set a different NCCL_HOSTID per rank plus "
        "NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 (under mpirun: mpirun -np N sh -c "
        "'NCCL_HOSTID=rank$OMPI_COMM_WORLD_RANK exec ringpack ...')");
  }
  return {};
}

// Creates the NCCL communicator of `rank` (non-blocking) and polls its initialisation with the
// deadline; aborts it and throws on an error or at the deadline.
ncclComm_t init_comm(const ncclUniqueId& id, int rank, int size, int device,
                     double timeout_seconds) {
  RINGPACK_CUDA_CHECK(cudaSetDevice(device));
  const std::string who = detail::concat("rank ", rank, " of ", size, " on CUDA device ", device);
  const auto failure = [&](ncclResult_t result, ncclComm_t comm) {
    std::string hint;
    if (result == ncclInvalidUsage) {
      hint =
          "; if several ranks share one GPU, give each rank its own NCCL_HOSTID (plus "
          "NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)";
    } else if (result == ncclSystemError || result == ncclRemoteError) {
      hint =
          "; a peer rank may have failed, or the ranks cannot reach each other "
          "(NCCL_SOCKET_IFNAME picks the network interface)";
    }
    return detail::concat("rank ", rank, ": NCCL could not set up the communicator (", who,
                          "): ", detail::nccl_error_text(result, comm), hint);
  };
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; init is polled below, with the deadline
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    const std::string message = failure(started, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    RINGPACK_FAIL(message);
  }
  const auto deadline = deadline_after(timeout_seconds);
  Backoff backoff;
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t queried = ncclCommGetAsyncError(comm, &state);
    if (queried != ncclSuccess) state = queried;
    if (state == ncclSuccess) return comm;
    if (state != ncclInProgress) {
      const std::string message = failure(state, comm);
      ncclCommAbort(comm);
      RINGPACK_FAIL(message);
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm);
      RINGPACK_FAIL("rank ", rank, ": NCCL initialisation (", who, ") did not finish within ",
                    timeout_seconds,
                    " s (--comm-timeout): a rank is missing or stuck, or the ranks got different "
                    "unique ids; the communicator was aborted");
    }
    backoff.pause();
  }
}

// What the communicator and its requests share: the compute stream (the backend's, not owned),
// the event pool, and whether the communicator was aborted.
struct NcclShared {
  NcclShared(int rank_in, int device_in, cudaStream_t compute_in)
      : rank(rank_in), device(device_in), compute(compute_in), events(device_in) {}
  const int rank;
  const int device;
  const cudaStream_t compute;
  cuda::EventPool events;
  std::atomic<bool> aborted{false};
};

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(std::shared_ptr<NcclShared> shared, cuda::PooledEvent done, TransferMarks marks)
      : shared_(std::move(shared)), done_(std::move(done)), marks_(marks) {}
  ~NcclRequest() override {
    // Not waited on: later compute-stream work (a stream-ordered free of the buffers) must still
    // follow the transfer. A stream-ordered wait, never a host one; none after an abort.
    if (!waited_ && !shared_->aborted) {
      cudaSetDevice(shared_->device);
      cudaStreamWaitEvent(shared_->compute, done_.get(), 0);
    }
  }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;

  void wait() override {
    if (waited_) return;
    RINGPACK_CHECK(!shared_->aborted, "rank ", shared_->rank,
                   ": the nccl communicator was aborted: this transfer will not complete");
    RINGPACK_CUDA_CHECK(cudaSetDevice(shared_->device));
    RINGPACK_CUDA_CHECK(cudaStreamWaitEvent(shared_->compute, done_.get(), 0));
    waited_ = true;
  }

  TransferMarks marks() const override { return marks_; }

 private:
  std::shared_ptr<NcclShared> shared_;  // declared first: outlives done_, which returns to its pool
  cuda::PooledEvent done_;
  TransferMarks marks_;
  bool waited_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, bool owned, int rank, int size, int device,
                   cudaStream_t compute, double timeout_seconds)
      : comm_(comm),
        owned_(owned),
        rank_(rank),
        size_(size),
        device_(device),
        timeout_(timeout_seconds),
        shared_(std::make_shared<NcclShared>(rank, device, compute)) {}

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (owned_ && comm_ != nullptr) {
      if (!failed_ && finalize()) {
        ncclCommDestroy(comm_);  // returns at once after a finished finalize
      } else {
        ncclCommAbort(comm_);
      }
    }
    comm_ = nullptr;
    // Stream-ordered: no device-wide synchronisation (a cudaFree could wait forever on a compute
    // stream that waits on an aborted transfer). CUDA releases the stream once its work ran.
    if (barrier_value_ != nullptr) cudaFreeAsync(barrier_value_, transfer_);
    if (transfer_ != nullptr) cudaStreamDestroy(transfer_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // The transfer stream and the barrier's int; an exception leaves the communicator failed (the
  // destructor then aborts it).
  void start() {
    guarded([&] {
      bind();
      int least = 0;
      int greatest = 0;
      RINGPACK_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      RINGPACK_CUDA_CHECK(
          cudaStreamCreateWithPriority(&transfer_, cudaStreamNonBlocking, greatest));
      void* value = nullptr;
      RINGPACK_CUDA_CHECK(cudaMallocAsync(&value, sizeof(int), transfer_));
      barrier_value_ = static_cast<int*>(value);
      RINGPACK_CUDA_CHECK(cudaMemsetAsync(barrier_value_, 0, sizeof(int), transfer_));
    });
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) override {
    check_peer(peer, "isend");
    check_buffer(data, bytes, "isend");
    return post("isend", bytes, bytes, [&] {
      RINGPACK_NCCL_ISSUE(ncclSend(data, bytes, ncclUint8, peer, comm_, transfer_), rank_);
    });
  }

  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) override {
    check_peer(peer, "irecv");
    check_buffer(data, bytes, "irecv");
    return post("irecv", 0, bytes, [&] {
      RINGPACK_NCCL_ISSUE(ncclRecv(data, bytes, ncclUint8, peer, comm_, transfer_), rank_);
    });
  }

  std::unique_ptr<CommRequest> exchange(const void* send, int dst, void* recv, int src,
                                        size_t bytes) override {
    check_peer(dst, "exchange (destination)");
    check_peer(src, "exchange (source)");
    check_buffer(send, bytes, "exchange (send)");
    check_buffer(recv, bytes, "exchange (receive)");
    return post("exchange", bytes, bytes, [&] {
      RINGPACK_NCCL_ISSUE(ncclSend(send, bytes, ncclUint8, dst, comm_, transfer_), rank_);
      RINGPACK_NCCL_ISSUE(ncclRecv(recv, bytes, ncclUint8, src, comm_, transfer_), rank_);
    });
  }

  void all_gather(const void* send, void* recv, size_t bytes) override {
    check_buffer(send, bytes, "all_gather (send)");
    check_buffer(recv, bytes, "all_gather (receive)");
    collective("all_gather", bytes * size_t(size_ - 1), bytes, [&] {
      RINGPACK_NCCL_ISSUE(ncclAllGather(send, recv, bytes, ncclUint8, comm_, transfer_), rank_);
    });
  }

  void reduce_scatter_sum(const float* send, float* recv, size_t count) override {
    check_buffer(send, count, "reduce_scatter_sum (send)");
    check_buffer(recv, count, "reduce_scatter_sum (receive)");
    collective("reduce_scatter_sum", count * sizeof(float) * size_t(size_ - 1), count, [&] {
      RINGPACK_NCCL_ISSUE(
          ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, comm_, transfer_), rank_);
    });
  }

  void barrier() override {
    check_usable("barrier");
    guarded([&] {
      bind();
      run_group("barrier", [&] {
        RINGPACK_NCCL_ISSUE(
            ncclAllReduce(barrier_value_, barrier_value_, 1, ncclInt32, ncclSum, comm_, transfer_),
            rank_);
      });
      wait_transfer_stream("the barrier");
    });
  }

  uint64_t bytes_sent() const override { return bytes_sent_; }
  void* stream() const override { return transfer_; }
  double timeout_seconds() const override { return timeout_; }

  void check_failures() override {
    check_usable("check_failures");
    RINGPACK_CUDA_CHECK(cudaSetDevice(device_));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
    if (queried != ncclSuccess) state = queried;
    if (state != ncclSuccess && state != ncclInProgress) {
      failed_ = true;
      RINGPACK_FAIL("rank ", rank_,
                    ": NCCL reported an error: ", detail::nccl_error_text(state, comm_),
                    "; a peer rank may have died or lost its connection (see its error)");
    }
    const cudaError_t status = cudaStreamQuery(transfer_);
    if (status != cudaSuccess && status != cudaErrorNotReady) {
      failed_ = true;
      RINGPACK_FAIL("rank ", rank_,
                    ": CUDA reported an error on the device: ", cudaGetErrorString(status));
    }
  }

  void abort() override {
    if (aborted_) return;
    aborted_ = true;
    failed_ = true;
    shared_->aborted = true;
    if (owned_ && comm_ != nullptr) {
      cudaSetDevice(device_);
      ncclCommAbort(comm_);  // stops the kernels and the proxy; returns promptly
      comm_ = nullptr;
    }
    // A borrowed communicator stays with its owner, who must abort it.
  }

  void set_timeline(Timeline* timeline) override { timeline_ = timeline; }

 private:
  // Runs body; any exception aborts the communicator (the run is over) and propagates. (Errors
  // in the arguments, checked before, leave it usable.)
  template <class Body>
  void guarded(Body&& body) {
    try {
      body();
    } catch (const std::exception& error) {
      if (failure_.empty()) failure_ = error.what();
      abort();
      throw;
    } catch (...) {
      abort();
      throw;
    }
  }

  void bind() const { RINGPACK_CUDA_CHECK(cudaSetDevice(device_)); }

  void check_usable(const char* what) const {
    RINGPACK_CHECK(!aborted_, "rank ", rank_, ": ", what,
                   ": the nccl communicator was aborted and cannot be used again",
                   failure_.empty() ? std::string() : "; it failed with: " + failure_);
  }

  void check_peer(int peer, const char* what) const {
    RINGPACK_CHECK(peer >= 0 && peer < size_, "rank ", rank_, ": ", what, " names rank ", peer,
                   ", outside 0..", size_ - 1);
  }

  void check_buffer(const void* data, size_t count, const char* what) const {
    RINGPACK_CHECK(count == 0 || data != nullptr, "rank ", rank_, ": ", what,
                   " got a null buffer for ", count, " elements");
  }

  // A time point on the transfer stream, when a timeline is set.
  std::optional<size_t> mark() {
    if (timeline_ == nullptr) return std::nullopt;
    return timeline_->mark(transfer_);
  }

  // The transfer stream waits for the work queued on the compute stream so far.
  void order_after_compute() {
    const cuda::PooledEvent ready(shared_->events);
    RINGPACK_CUDA_CHECK(cudaEventRecord(ready.get(), shared_->compute));
    RINGPACK_CUDA_CHECK(cudaStreamWaitEvent(transfer_, ready.get(), 0));
  }  // `ready` goes back to the pool: the wait captured it

  cuda::PooledEvent record_done() {
    cuda::PooledEvent done(shared_->events);
    RINGPACK_CUDA_CHECK(cudaEventRecord(done.get(), transfer_));
    return done;
  }

  // One NCCL group of this thread around ops(); returns once its kernels are on the transfer
  // stream (polling a non-blocking ncclGroupEnd with the deadline).
  template <class Ops>
  void run_group(const char* what, Ops&& ops) {
    RINGPACK_NCCL_CHECK(ncclGroupStart(), rank_);
    try {
      ops();
    } catch (...) {
      ncclGroupEnd();  // closes this thread's group; the communicator is aborted next
      throw;
    }
    await_call(RINGPACK_NCCL_ISSUE(ncclGroupEnd(), rank_), what);
  }

  // A point-to-point request: ready, [mark], group (none for 0 bytes), [mark], done.
  template <class Ops>
  std::unique_ptr<CommRequest> post(const char* what, uint64_t sent, size_t bytes, Ops&& ops) {
    check_usable(what);
    std::unique_ptr<CommRequest> request;
    guarded([&] {
      bind();
      order_after_compute();
      const std::optional<size_t> begin = mark();
      if (bytes > 0) run_group(what, ops);
      TransferMarks marks;
      if (begin) marks = std::make_pair(*begin, timeline_->mark(transfer_));
      request = std::make_unique<NcclRequest>(shared_, record_done(), marks);
      bytes_sent_ += sent;
    });
    return request;
  }

  // A collective of `count` elements per rank (none: nothing to do): ready, group, done; the
  // compute stream waits on done.
  template <class Ops>
  void collective(const char* what, uint64_t sent, size_t count, Ops&& ops) {
    check_usable(what);
    if (count == 0) return;
    guarded([&] {
      bind();
      order_after_compute();
      run_group(what, ops);
      const cuda::PooledEvent done = record_done();
      RINGPACK_CUDA_CHECK(cudaStreamWaitEvent(shared_->compute, done.get(), 0));
      bytes_sent_ += sent;
    });
  }

  // `issued` is ncclSuccess or ncclInProgress: then polls until the call finished in the
  // background, with the deadline.
  void await_call(ncclResult_t issued, const char* what) {
    if (issued == ncclSuccess) return;
    const auto deadline = deadline_after(timeout_);
    Backoff backoff;
    while (true) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
      if (queried != ncclSuccess) state = queried;
      if (state == ncclSuccess) return;
      RINGPACK_CHECK(state == ncclInProgress, "rank ", rank_, ": NCCL ", what,
                     " failed: ", detail::nccl_error_text(state, comm_),
                     "; a peer rank may have died (see its error)");
      RINGPACK_CHECK(Clock::now() < deadline, "rank ", rank_, ": NCCL ", what,
                     " could not start within ", timeout_,
                     " s (--comm-timeout): a peer rank may have died or hung; this rank stops "
                     "(communicator aborted)");
      backoff.pause();
    }
  }

  // Polls until the transfer stream ran everything queued on it, with the deadline.
  void wait_transfer_stream(const char* what) {
    const auto deadline = deadline_after(timeout_);
    Backoff backoff;
    while (true) {
      const cudaError_t status = cudaStreamQuery(transfer_);
      if (status == cudaSuccess) return;
      RINGPACK_CHECK(status == cudaErrorNotReady, "rank ", rank_, ": ", what,
                     " failed on the device: CUDA error: ", cudaGetErrorString(status));
      ncclResult_t state = ncclSuccess;
      const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
      if (queried != ncclSuccess) state = queried;
      RINGPACK_CHECK(state == ncclSuccess || state == ncclInProgress, "rank ", rank_, ": ", what,
                     " failed: NCCL: ", detail::nccl_error_text(state, comm_),
                     "; a peer rank may have died (see its error)");
      RINGPACK_CHECK(Clock::now() < deadline, "rank ", rank_, ": ", what, " did not finish within ",
                     timeout_,
                     " s (--comm-timeout): a peer rank may have died or hung; this rank stops "
                     "(communicator aborted)");
      backoff.pause();
    }
  }

  // ncclCommFinalize, polled with the deadline; false when it failed or timed out.
  bool finalize() noexcept {
    const ncclResult_t started = ncclCommFinalize(comm_);
    if (started != ncclSuccess && started != ncclInProgress) return false;
    const auto deadline = deadline_after(timeout_);
    Backoff backoff;
    while (true) {
      ncclResult_t state = ncclInProgress;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return false;
      if (state == ncclSuccess) return true;
      if (state != ncclInProgress || Clock::now() >= deadline) return false;
      backoff.pause();
    }
  }

  ncclComm_t comm_;
  const bool owned_;
  const int rank_;
  const int size_;
  const int device_;
  const double timeout_;
  std::shared_ptr<NcclShared> shared_;
  cudaStream_t transfer_ = nullptr;
  int* barrier_value_ = nullptr;  // the barrier's all-reduce operand (device memory)
  Timeline* timeline_ = nullptr;
  uint64_t bytes_sent_ = 0;
  bool failed_ = false;   // an error was seen: the destructor aborts instead of finalising
  bool aborted_ = false;  // abort() ran: every call throws
  std::string failure_;   // the first error, named by later calls
};

std::unique_ptr<Communicator> start_communicator(ncclComm_t comm, bool owned, int rank, int size,
                                                 int device, AttentionBackend& backend,
                                                 double timeout_seconds) {
  auto communicator = std::make_unique<NcclCommunicator>(
      comm, owned, rank, size, device, static_cast<cudaStream_t>(backend.stream()),
      timeout_seconds);
  communicator->start();
  return communicator;
}

void check_timeout(double timeout_seconds) {
  RINGPACK_CHECK(timeout_seconds > 0, "communication timeout ", timeout_seconds,
                 " s must be positive (--comm-timeout)");
}

}  // namespace

bool nccl_available() {
  return true;
}

NcclUniqueId make_nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  RINGPACK_CHECK(result == ncclSuccess,
                 "NCCL could not make a unique id (it opens a bootstrap socket on a network "
                 "interface): ",
                 detail::nccl_error_text(result, nullptr),
                 "; NCCL_SOCKET_IFNAME picks the interface (lo for ranks of one node)");
  NcclUniqueId bytes;
  std::memcpy(bytes.data(), &id, bytes.size());
  return bytes;
}

int launcher_device(const LauncherEnv& env) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  RINGPACK_CHECK(status == cudaSuccess && count > 0, describe(env),
                 ": no usable CUDA device is visible to this process (",
                 status == cudaSuccess ? "none found" : cudaGetErrorString(status),
                 "); --comm nccl runs one rank per GPU");
  return launcher_device(env, count);
}

std::unique_ptr<Communicator> make_nccl_communicator(const LauncherEnv& env,
                                                     AttentionBackend& backend,
                                                     double timeout_seconds) {
  check_timeout(timeout_seconds);
  RINGPACK_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, describe(env),
                 " does not exist");
  const int device = backend_device(backend);
  NcclUniqueId id{};
  if (env.world_size == 1) {
    id = make_nccl_unique_id();
  } else {
    Rendezvous rendezvous(rendezvous_config(env, timeout_seconds));
    // Before NCCL: two ranks on one GPU, or two NCCL versions, get a clear message on every rank.
    const std::vector<std::string> identities = rendezvous.gather(encode(local_identity(device)));
    std::string verdict;
    if (env.rank == 0) {
      verdict = check_identities(identities);
      if (verdict.empty()) {
        try {
          id = make_nccl_unique_id();
        } catch (const Error& error) {
          verdict = std::string("rank 0: ") + error.what();
        }
      }
    }
    rendezvous.settle(verdict);
    rendezvous.broadcast(id.data(), id.size());
  }
  return make_nccl_communicator_from_id(id.data(), env.rank, env.world_size, backend,
                                        timeout_seconds);
}

std::unique_ptr<Communicator> make_nccl_communicator_from_id(const void* unique_id, int rank,
                                                             int size, AttentionBackend& backend,
                                                             double timeout_seconds) {
  check_timeout(timeout_seconds);
  RINGPACK_CHECK(unique_id != nullptr, "rank ", rank, ": the NCCL unique id is a null pointer");
  RINGPACK_CHECK(size >= 1 && rank >= 0 && rank < size, "nccl communicator: rank ", rank, " of ",
                 size, " does not exist (0 <= rank < size)");
  const int device = backend_device(backend);
  ncclUniqueId id;
  std::memcpy(&id, unique_id, sizeof(id));
  const ncclComm_t comm = init_comm(id, rank, size, device, timeout_seconds);
  return start_communicator(comm, /*owned=*/true, rank, size, device, backend, timeout_seconds);
}

std::unique_ptr<Communicator> borrow_nccl_communicator(void* nccl_comm, AttentionBackend& backend,
                                                       double timeout_seconds) {
  check_timeout(timeout_seconds);
  RINGPACK_CHECK(nccl_comm != nullptr, "borrow_nccl_communicator: the ncclComm_t is null");
  const int device = backend_device(backend);
  const auto comm = static_cast<ncclComm_t>(nccl_comm);
  int rank = -1;
  int size = 0;
  int comm_device = -1;
  RINGPACK_NCCL_CHECK(ncclCommUserRank(comm, &rank), -1);
  RINGPACK_NCCL_CHECK(ncclCommCount(comm, &size), rank);
  RINGPACK_NCCL_CHECK(ncclCommCuDevice(comm, &comm_device), rank);
  RINGPACK_CHECK(comm_device == device, "rank ", rank,
                 ": the borrowed NCCL communicator lives on CUDA device ", comm_device,
                 " but the backend computes on device ", device,
                 ": make the backend on the communicator's device");
  return start_communicator(comm, /*owned=*/false, rank, size, device, backend, timeout_seconds);
}

}  // namespace ringpack
