// The MPI communicator (see mpi_communicator.h for the contract): non-blocking MPI calls on a
// duplicate of MPI_COMM_WORLD, completed by polling MPI_Test against the --comm-timeout deadline,
// messages above the chunk size split into several MPI calls, MPI errors turned into
// ringpack::Error, and MPI initialised once per process and finalised at exit.
#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ringpack/error.h"

namespace ringpack {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPointToPointTag = 0;
constexpr int kAbortStatus = 2;  // the exit status of every rank after abort()
// Seconds the destructor of an unfinished request (an error is unwinding) waits for it.
constexpr double kAbandonGraceSeconds = 1.0;

std::mutex g_init_mutex;
// A transfer was left in flight: MPI_Finalize could wait for a peer that is gone, so the process
// aborts at exit instead.
std::atomic<bool> g_abandoned{false};
// Seconds MPI_Init_thread and MPI_Finalize may take: the timeout of the latest communicator.
std::atomic<double> g_watchdog_seconds{kDefaultCommTimeoutSeconds};

// This process's rank as the launcher set it (MPI may not be initialised yet).
std::string launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* value = std::getenv(name)) return value;
  }
  return "?";
}

// Runs `call` (MPI_Init_thread or MPI_Finalize: they wait for every rank of the launch and have no
// deadline of their own). When it has not returned after `seconds`, prints why and ends the
// process with status 2, so that mpirun stops the job instead of leaving it hanging.
template <class Call>
void with_watchdog(double seconds, const char* name, const char* cause, Call&& call) {
  std::mutex mutex;
  std::condition_variable returned_cv;
  bool returned = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mutex);
    if (returned_cv.wait_for(lock, std::chrono::duration<double>(seconds),
                             [&] { return returned; })) {
      return;
    }
    std::fprintf(stderr,
                 "ringpack: error: rank %s: %s did not complete within %g s (--comm-timeout): "
                 "%s\n",
                 launcher_rank().c_str(), name, seconds, cause);
    std::fflush(stderr);
    std::_Exit(kAbortStatus);
  });
  call();
  {
    std::lock_guard<std::mutex> lock(mutex);
    returned = true;
  }
  returned_cv.notify_all();
  watchdog.join();
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return detail::concat("MPI error code ", code);
  }
  return std::string(text, size_t(length));
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void finalize_at_exit() {
  if (mpi_finalized()) return;
  if (g_abandoned.load()) MPI_Abort(MPI_COMM_WORLD, kAbortStatus);
  with_watchdog(g_watchdog_seconds.load(), "MPI_Finalize",
                "a rank stopped or hung before the end of the run", [] { MPI_Finalize(); });
}

void ensure_mpi_initialized() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  RINGPACK_CHECK(!mpi_finalized(),
                 "MPI was already finalised in this process: create MPI communicators before "
                 "MPI_Finalize");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;  // someone else's MPI: theirs to finalise
  int provided = 0;
  int rc = MPI_SUCCESS;
  with_watchdog(g_watchdog_seconds.load(), "MPI_Init_thread",
                "a rank of the launch did not start, or stopped or hung before it joined MPI",
                [&] { rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided); });
  RINGPACK_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed: ", mpi_error_string(rc),
                 ": start the ranks with mpirun -np N (Open MPI: apt-get install openmpi-bin)");
  std::atexit(finalize_at_exit);
}

// Polls `test` (true when done) until it returns true or `deadline` passed; false on timeout.
// Yields first, then sleeps briefly, so that oversubscribed ranks leave the cores to each other.
template <class Test>
bool poll_until(Clock::time_point deadline, Test&& test) {
  for (int round = 0;; ++round) {
    if (test()) return true;
    if (Clock::now() >= deadline) return test();
    if (round < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A message of `bytes` as pieces of at most `chunk` bytes (one empty piece for an empty message,
// so that empty sends still match empty receives).
std::vector<std::pair<size_t, int>> split(size_t bytes, size_t chunk) {
  std::vector<std::pair<size_t, int>> pieces;  // (offset, length)
  size_t offset = 0;
  do {
    const size_t length = std::min(chunk, bytes - offset);
    pieces.emplace_back(offset, int(length));
    offset += length;
  } while (offset < bytes);
  return pieces;
}

class MpiCommunicator;

// One isend or irecv: one MPI request per piece.
class MpiRequest final : public CommRequest {
 public:
  MpiRequest(MpiCommunicator& comm, bool is_send, int peer, size_t bytes)
      : comm_(comm), is_send_(is_send), peer_(peer), bytes_(bytes) {}
  ~MpiRequest() override;
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  void add(MPI_Request request, int length) {
    requests_.push_back(request);
    lengths_.push_back(length);
  }
  void wait() override;

 private:
  bool test();  // true when every piece completed; throws on MPI errors and size mismatches
  std::string what() const;

  MpiCommunicator& comm_;
  const bool is_send_;
  const int peer_;
  const size_t bytes_;
  std::vector<MPI_Request> requests_;  // MPI_REQUEST_NULL once complete
  std::vector<int> lengths_;
  std::string error_;  // the MPI error or size mismatch a wait threw
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(double timeout_seconds, size_t chunk_bytes)
      : timeout_seconds_(timeout_seconds), chunk_bytes_(chunk_bytes) {
    const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    RINGPACK_CHECK(rc == MPI_SUCCESS,
                   "MPI_Comm_dup of MPI_COMM_WORLD failed: ", mpi_error_string(rc));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (!mpi_finalized()) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) override {
    return post(true, const_cast<void*>(data), bytes, peer);
  }
  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) override {
    return post(false, data, bytes, peer);
  }
  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter_sum(const float* send, float* recv, size_t count) override;
  void barrier() override;

  uint64_t bytes_sent() const override { return bytes_sent_; }
  double timeout_seconds() const override { return timeout_seconds_; }
  void check_failures() override {
    if (!failure_.empty()) RINGPACK_FAIL(failure_);
  }
  void abort() override {
    if (mpi_finalized()) return;
    report_current_exception();
    MPI_Abort(comm_, kAbortStatus);
  }

  // abort() does not return, so the error that led to it is printed here, as the CLI would
  // print it ("ringpack: error: <message>", one line), naming this rank.
  void report_current_exception() const {
    const std::exception_ptr current = std::current_exception();
    if (!current) return;
    std::string message;
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "unknown exception";
    }
    std::replace(message.begin(), message.end(), '\n', ' ');
    if (message.rfind("rank ", 0) != 0) message = detail::concat("rank ", rank_, ": ", message);
    std::fprintf(stderr, "ringpack: error: %s\n", message.c_str());
    std::fflush(stderr);
  }

  // Records the first failure (check_failures rethrows it) and throws it.
  [[noreturn]] void fail(const std::string& message) {
    if (failure_.empty()) failure_ = message;
    RINGPACK_FAIL(message);
  }
  void check_mpi(int rc, const char* call, const std::string& what) {
    if (rc != MPI_SUCCESS) {
      fail(detail::concat("rank ", rank_, ": ", call, " (", what,
                          ") failed: ", mpi_error_string(rc)));
    }
  }

 private:
  std::unique_ptr<CommRequest> post(bool is_send, void* data, size_t bytes, int peer);
  // Waits for the requests of one collective; throws naming `what` on timeout.
  void wait_collective(std::vector<MPI_Request>& requests, const std::string& what);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  const double timeout_seconds_;
  const size_t chunk_bytes_;
  uint64_t bytes_sent_ = 0;
  std::string failure_;  // the first MPI error or timeout, for check_failures()
};

// ---- MpiRequest -------------------------------------------------------------------------------

std::string MpiRequest::what() const {
  return is_send_ ? detail::concat("the send of ", bytes_, " bytes to rank ", peer_)
                  : detail::concat("the recv of ", bytes_, " bytes from rank ", peer_);
}

bool MpiRequest::test() {
  bool done = true;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    int flag = 0;
    MPI_Status status;
    const int rc = MPI_Test(&requests_[i], &flag, &status);
    int error_class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
    if (error_class == MPI_ERR_TRUNCATE) {
      comm_.fail(detail::concat("rank ", comm_.rank(), ": ", what(), " got a larger message (",
                                mpi_error_string(rc),
                                "): matched messages must have equal sizes (check the order of "
                                "posts between the ranks)"));
    }
    comm_.check_mpi(rc, "MPI_Test", what());
    if (!flag) {
      done = false;
      continue;
    }
    if (!is_send_) {
      int received = 0;
      MPI_Get_count(&status, MPI_BYTE, &received);
      if (received != lengths_[i]) {
        comm_.fail(detail::concat("rank ", comm_.rank(), ": ", what(), " got a message of ",
                                  received, " bytes where ", lengths_[i],
                                  " were expected: matched messages must have equal sizes (check "
                                  "the order of posts between the ranks)"));
      }
    }
  }
  return done;
}

void MpiRequest::wait() {
  if (!error_.empty()) RINGPACK_FAIL(error_);  // a failed request stays failed
  const double timeout = comm_.timeout_seconds();
  const auto test_or_record = [&] {
    try {
      return test();
    } catch (const Error& e) {
      error_ = e.what();
      throw;
    }
  };
  if (poll_until(deadline_after(timeout), test_or_record)) return;
  comm_.fail(detail::concat("rank ", comm_.rank(), ": ", what(), " did not complete within ",
                            timeout, " s (--comm-timeout): rank ", peer_,
                            " may have died or hung"));
}

MpiRequest::~MpiRequest() {
  const bool pending = std::any_of(requests_.begin(), requests_.end(),
                                   [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
  if (!pending || mpi_finalized()) return;
  // An error is unwinding past this transfer: withdraw receives that did not match, give sends
  // and matched receives a moment, and abandon what is left (the process then aborts at exit).
  if (!is_send_) {
    for (MPI_Request& request : requests_) {
      if (request != MPI_REQUEST_NULL) MPI_Cancel(&request);
    }
  }
  const auto settled = [&] {
    for (MPI_Request& request : requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      int flag = 0;
      if (MPI_Test(&request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return true;
      if (!flag) return false;
    }
    return true;
  };
  if (poll_until(deadline_after(std::min(kAbandonGraceSeconds, comm_.timeout_seconds())),
                 settled)) {
    bool left = false;
    for (MPI_Request request : requests_) left = left || request != MPI_REQUEST_NULL;
    if (!left) return;
  }
  g_abandoned = true;
  for (MPI_Request& request : requests_) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  }
}

// ---- MpiCommunicator --------------------------------------------------------------------------

std::unique_ptr<CommRequest> MpiCommunicator::post(bool is_send, void* data, size_t bytes,
                                                   int peer) {
  const char* call = is_send ? "MPI_Isend" : "MPI_Irecv";
  RINGPACK_CHECK(peer >= 0 && peer < size_, "rank ", rank_, ": ", call, " peer ", peer,
                 " is out of range: use a rank in [0, ", size_, ")");
  RINGPACK_CHECK(bytes == 0 || data != nullptr, "rank ", rank_, ": ", call, " of ", bytes,
                 " bytes got a null buffer");
  auto request = std::make_unique<MpiRequest>(*this, is_send, peer, bytes);
  auto* base = static_cast<std::byte*>(data);
  for (const auto& [offset, length] : split(bytes, chunk_bytes_)) {
    MPI_Request piece = MPI_REQUEST_NULL;
    const std::string what =
        detail::concat(bytes, " bytes ", is_send ? "to" : "from", " rank ", peer);
    const int rc =
        is_send ? MPI_Isend(base + offset, length, MPI_BYTE, peer, kPointToPointTag, comm_, &piece)
                : MPI_Irecv(base + offset, length, MPI_BYTE, peer, kPointToPointTag, comm_, &piece);
    check_mpi(rc, call, what);  // pieces posted so far are withdrawn by ~MpiRequest
    request->add(piece, length);
  }
  if (is_send) bytes_sent_ += bytes;
  return request;
}

void MpiCommunicator::wait_collective(std::vector<MPI_Request>& requests, const std::string& what) {
  const auto test = [&] {
    for (MPI_Request& request : requests) {
      if (request == MPI_REQUEST_NULL) continue;
      int flag = 0;
      check_mpi(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), "MPI_Test", what);
      if (!flag) return false;
    }
    return true;
  };
  if (poll_until(deadline_after(timeout_seconds_), test)) return;
  // Collectives cannot be cancelled: the buffers stay MPI's, and the process aborts at exit.
  g_abandoned = true;
  fail(detail::concat("rank ", rank_, ": ", what, " did not complete within ", timeout_seconds_,
                      " s (--comm-timeout): a rank died, hung or did not enter the same "
                      "collective"));
}

// A datatype of `length` elements of `element` whose extent is `stride` bytes: piece k of every
// rank's block in a [size][stride] buffer.
MPI_Datatype strided_piece(int length, MPI_Datatype element, size_t stride) {
  MPI_Datatype contiguous = MPI_DATATYPE_NULL;
  MPI_Datatype resized = MPI_DATATYPE_NULL;
  MPI_Type_contiguous(length, element, &contiguous);
  MPI_Type_create_resized(contiguous, 0, MPI_Aint(stride), &resized);
  MPI_Type_commit(&resized);
  MPI_Type_free(&contiguous);
  return resized;
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  const std::string what = detail::concat("all_gather of ", bytes, " bytes per rank");
  auto* gathered = static_cast<std::byte*>(recv);  // [size][bytes]
  const bool in_place = send == gathered + size_t(rank_) * bytes;
  const auto pieces = split(bytes, chunk_bytes_);
  std::vector<MPI_Request> requests;
  for (const auto& [offset, length] : pieces) {
    MPI_Request request = MPI_REQUEST_NULL;
    const void* source = in_place ? MPI_IN_PLACE : static_cast<const std::byte*>(send) + offset;
    int rc = MPI_SUCCESS;
    if (pieces.size() == 1) {
      rc = MPI_Iallgather(source, length, MPI_BYTE, gathered, length, MPI_BYTE, comm_, &request);
    } else {
      MPI_Datatype piece = strided_piece(length, MPI_BYTE, bytes);
      rc = MPI_Iallgather(source, length, MPI_BYTE, gathered + offset, 1, piece, comm_, &request);
      MPI_Type_free(&piece);  // freed once the collective no longer needs it
    }
    check_mpi(rc, "MPI_Iallgather", what);
    requests.push_back(request);
  }
  wait_collective(requests, what);
  bytes_sent_ += uint64_t(bytes) * uint64_t(size_ - 1);
}

void MpiCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t count) {
  const std::string what = detail::concat("reduce_scatter_sum of ", count, " floats per rank");
  // MPI needs recv apart from send; an overlapping recv gets the result through a copy.
  const auto address = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const bool overlaps = address(recv) < address(send + size_t(size_) * count) &&
                        address(send) < address(recv + count);
  std::vector<float> staged(overlaps ? count : 0);
  float* result = overlaps ? staged.data() : recv;
  const size_t chunk_floats = std::max<size_t>(1, chunk_bytes_ / sizeof(float));
  const auto pieces = split(count, chunk_floats);
  std::vector<MPI_Request> requests;
  for (const auto& [offset, length] : pieces) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (pieces.size() == 1) {
      check_mpi(
          MPI_Ireduce_scatter_block(send, result, length, MPI_FLOAT, MPI_SUM, comm_, &request),
          "MPI_Ireduce_scatter_block", what);
      requests.push_back(request);
      continue;
    }
    // MPI's predefined sums take no derived datatypes: a piece is one reduce to each rank.
    for (int root = 0; root < size_; ++root) {
      check_mpi(MPI_Ireduce(send + size_t(root) * count + offset,
                            root == rank_ ? result + offset : nullptr, length, MPI_FLOAT, MPI_SUM,
                            root, comm_, &request),
                "MPI_Ireduce", what);
      requests.push_back(request);
    }
  }
  wait_collective(requests, what);
  if (overlaps && count > 0) std::memcpy(recv, staged.data(), count * sizeof(float));
  bytes_sent_ += uint64_t(count) * sizeof(float) * uint64_t(size_ - 1);
}

void MpiCommunicator::barrier() {
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  check_mpi(MPI_Ibarrier(comm_, &requests[0]), "MPI_Ibarrier", "barrier");
  wait_collective(requests, "the barrier");
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds, size_t chunk_bytes) {
  RINGPACK_CHECK(timeout_seconds > 0, "communication timeout ", timeout_seconds,
                 " s must be positive (--comm-timeout)");
  RINGPACK_CHECK(chunk_bytes > 0 && chunk_bytes <= size_t(INT_MAX), "MPI chunk size ", chunk_bytes,
                 " bytes is invalid: use 1 to ", INT_MAX, " bytes");
  g_watchdog_seconds = timeout_seconds;
  ensure_mpi_initialized();
  return std::make_unique<MpiCommunicator>(timeout_seconds, chunk_bytes);
}

}  // namespace ringpack
