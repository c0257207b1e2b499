// The NCCL communicator (src/comm/nccl_communicator.h) on one GPU.
//  - NcclSingleRank: a communicator of one rank (no launcher): exchange to itself ordered
//    against the compute stream both ways (also when the request is dropped unwaited), timeline
//    marks, all_gather, reduce_scatter_sum, barrier, abort, argument errors, a launched world of
//    one, a borrowed ncclComm_t that stays with its owner, and an initialisation whose second
//    rank never comes (it must time out, not hang).
//  - NcclProcesses: 2 and 4 rank processes (this binary, re-run with --gtest_filter=NcclChild.Run)
//    sharing the GPU, each with its own NCCL_HOSTID over loopback sockets (the one-GPU test
//    setup): TCP rendezvous, NCCL init, a ring of exchanges, all_gather, reduce_scatter_sum,
//    barrier; and 2 processes WITHOUT their own NCCL_HOSTID, which must both stop with the clear
//    "ranks on 1 GPU" error before NCCL does.
// Every test skips without a CUDA device or without NCCL.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(RINGPACK_WITH_NCCL) && __has_include(<nccl.h>)
#include <cuda_runtime.h>
#include <nccl.h>
#define RINGPACK_TEST_HAS_NCCL_H 1
#endif

#include "comm/launcher.h"
#include "comm/nccl_communicator.h"
#include "gpu/gpu_test_support.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/error.h"

extern char** environ;

namespace ringpack::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTimeoutSeconds = 60.0;

// Memory of a backend, returned on destruction.
struct Buffer {
  Buffer(AttentionBackend& b, size_t bytes) : backend(b), ptr(b.allocate(bytes)) {}
  ~Buffer() { backend.deallocate(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* f32() const { return static_cast<float*>(ptr); }
  AttentionBackend& backend;
  void* ptr;
};

template <class T>
void upload(AttentionBackend& backend, void* dst, const std::vector<T>& host) {
  backend.copy_from_host(dst, host.data(), host.size() * sizeof(T));
}

// Copies after the work queued on the compute stream (copy_to_host waits for it).
template <class T>
std::vector<T> download(AttentionBackend& backend, const void* src, size_t count) {
  std::vector<T> host(count);
  backend.copy_to_host(host.data(), src, count * sizeof(T));
  return host;
}

// "" when got == expected, else the first difference.
std::string first_difference(const std::vector<float>& got, const std::vector<float>& expected) {
  if (got.size() != expected.size()) {
    return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(expected.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      std::ostringstream out;
      out << "element " << i << ": got " << got[i] << ", expected " << expected[i];
      return out.str();
    }
  }
  return "";
}

// Distinct values, exact in fp32 and in sums of a few of them.
std::vector<float> pattern(int rank, int round, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = float(rank * 1000 + round * 100 + int(i % 97));
  return values;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class NcclSingleRank : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
    // One rank bootstraps over loopback; a value the caller set wins.
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    backend = make_backend(BackendKind::kCuda, BackendOptions{});
  }

  std::unique_ptr<Communicator> make_comm() {
    const NcclUniqueId id = make_nccl_unique_id();
    return make_nccl_communicator_from_id(id.data(), 0, 1, *backend, kTimeoutSeconds);
  }

  // recv = -1 and send = value, queued on the compute stream (the host does not wait), then an
  // exchange to itself; `drop` destroys the request instead of waiting on it. Then recv += send
  // on the compute stream: 2 * value everywhere only when the transfer followed the fills and
  // the add followed the transfer.
  void exchange_round(Communicator& comm, Buffer& send, Buffer& recv, size_t count, float value,
                      bool drop) {
    backend->fill(recv.f32(), count, -1.0f);
    backend->fill(send.f32(), count, value);
    {
      std::unique_ptr<CommRequest> request =
          comm.exchange(send.ptr, 0, recv.ptr, 0, count * sizeof(float));
      if (!drop) {
        request->wait();
        request->wait();  // idempotent
      }
    }
    backend->accumulate(recv.f32(), send.f32(), count);
    EXPECT_EQ(first_difference(download<float>(*backend, recv.ptr, count),
                               std::vector<float>(count, 2.0f * value)),
              "")
        << "value " << value << (drop ? " (request dropped)" : "");
  }

  std::unique_ptr<AttentionBackend> backend;
};

// 16 MiB: a transfer long enough that a missing ordering shows.
constexpr size_t kLargeCount = size_t{1} << 22;

TEST_F(NcclSingleRank, ExchangeToItselfFollowsAndPrecedesTheComputeStream) {
  const auto comm = make_comm();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  ASSERT_NE(comm->stream(), nullptr);
  EXPECT_NE(comm->stream(), backend->stream());
  EXPECT_EQ(comm->timeout_seconds(), kTimeoutSeconds);
  Buffer send(*backend, kLargeCount * sizeof(float));
  Buffer recv(*backend, kLargeCount * sizeof(float));
  for (int round = 0; round < 3; ++round) {
    exchange_round(*comm, send, recv, kLargeCount, float(round) + 0.5f, /*drop=*/false);
  }
  EXPECT_EQ(comm->bytes_sent(), 3 * kLargeCount * sizeof(float));
  comm->check_failures();
}

TEST_F(NcclSingleRank, DroppedRequestStillOrdersLaterCompute) {
  const auto comm = make_comm();
  Buffer send(*backend, kLargeCount * sizeof(float));
  Buffer recv(*backend, kLargeCount * sizeof(float));
  for (int round = 0; round < 3; ++round) {
    exchange_round(*comm, send, recv, kLargeCount, float(round) + 1.25f, /*drop=*/true);
  }
  comm->check_failures();
}

TEST_F(NcclSingleRank, TimelineMarksSpanTheTransfer) {
  const auto comm = make_comm();
  constexpr size_t kCount = 1 << 16;
  Buffer send(*backend, kCount * sizeof(float));
  Buffer recv(*backend, kCount * sizeof(float));
  const std::unique_ptr<Timeline> timeline = backend->make_timeline();
  comm->set_timeline(timeline.get());
  const auto marked = comm->exchange(send.ptr, 0, recv.ptr, 0, kCount * sizeof(float));
  const auto marks = marked->marks();
  ASSERT_TRUE(marks.has_value());
  EXPECT_NE(marks->first, marks->second);
  marked->wait();
  comm->set_timeline(nullptr);
  const auto unmarked = comm->exchange(send.ptr, 0, recv.ptr, 0, kCount * sizeof(float));
  EXPECT_FALSE(unmarked->marks().has_value());
  unmarked->wait();
  backend->synchronize();
  EXPECT_LE(timeline->seconds(marks->first), timeline->seconds(marks->second));
  EXPECT_GE(timeline->seconds(marks->first), 0.0);
}

TEST_F(NcclSingleRank, AllGatherReduceScatterAndBarrier) {
  const auto comm = make_comm();
  constexpr size_t kBytes = 1001;
  std::vector<uint8_t> bytes(kBytes);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = uint8_t(i * 13 + 5);
  Buffer gather_send(*backend, kBytes);
  Buffer gather_recv(*backend, kBytes);
  upload(*backend, gather_send.ptr, bytes);
  comm->all_gather(gather_send.ptr, gather_recv.ptr, kBytes);
  EXPECT_EQ(download<uint8_t>(*backend, gather_recv.ptr, kBytes), bytes);

  constexpr size_t kCount = 777;
  const std::vector<float> values = pattern(0, 3, kCount);
  Buffer scatter_send(*backend, kCount * sizeof(float));
  Buffer scatter_recv(*backend, kCount * sizeof(float));
  upload(*backend, scatter_send.ptr, values);
  backend->fill(scatter_recv.f32(), kCount, std::nanf(""));
  comm->reduce_scatter_sum(scatter_send.f32(), scatter_recv.f32(), kCount);
  EXPECT_EQ(first_difference(download<float>(*backend, scatter_recv.ptr, kCount), values), "");

  comm->all_gather(nullptr, nullptr, 0);  // nothing to do
  comm->reduce_scatter_sum(nullptr, nullptr, 0);
  comm->barrier();
  comm->barrier();
  comm->check_failures();
  EXPECT_EQ(comm->bytes_sent(), 0u);  // one rank: nothing left it
}

TEST_F(NcclSingleRank, AbortMakesItUnusable) {
  auto comm = make_comm();
  constexpr size_t kCount = 1024;
  Buffer send(*backend, kCount * sizeof(float));
  Buffer recv(*backend, kCount * sizeof(float));
  comm->exchange(send.ptr, 0, recv.ptr, 0, kCount * sizeof(float))->wait();
  backend->synchronize();
  comm->abort();
  comm->abort();  // idempotent
  try {
    comm->exchange(send.ptr, 0, recv.ptr, 0, kCount * sizeof(float));
    FAIL() << "an aborted communicator must refuse transfers";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "rank 0: exchange: the nccl communicator was aborted"))
        << error.what();
  }
  EXPECT_THROW(comm->barrier(), Error);
  EXPECT_THROW(comm->check_failures(), Error);
  comm.reset();  // the destructor of an aborted communicator
  backend->synchronize();
}

TEST_F(NcclSingleRank, BadArgumentsAreErrors) {
  const NcclUniqueId id = make_nccl_unique_id();
  EXPECT_THROW(make_nccl_communicator_from_id(id.data(), 1, 1, *backend, kTimeoutSeconds), Error);
  EXPECT_THROW(make_nccl_communicator_from_id(nullptr, 0, 1, *backend, kTimeoutSeconds), Error);
  EXPECT_THROW(make_nccl_communicator_from_id(id.data(), 0, 1, *backend, 0.0), Error);
  const auto host = make_backend(BackendKind::kCpu, BackendOptions{});
  try {
    make_nccl_communicator_from_id(id.data(), 0, 1, *host, kTimeoutSeconds);
    FAIL() << "a host backend must be refused";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "needs --backend cuda")) << error.what();
  }
  EXPECT_THROW(borrow_nccl_communicator(nullptr, *backend, kTimeoutSeconds), Error);

  // A bad peer is refused without aborting the communicator.
  const auto comm = make_comm();
  constexpr size_t kCount = 256;
  Buffer send(*backend, kCount * sizeof(float));
  Buffer recv(*backend, kCount * sizeof(float));
  try {
    comm->exchange(send.ptr, 1, recv.ptr, 0, kCount * sizeof(float));
    FAIL() << "rank 1 does not exist";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "names rank 1, outside 0..0")) << error.what();
  }
  exchange_round(*comm, send, recv, kCount, 4.0f, /*drop=*/false);
}

TEST_F(NcclSingleRank, LaunchedWorldOfOneNeedsNoRendezvous) {
  LauncherEnv env;
  env.launcher = "torchrun";  // no MASTER_ADDR: a world of one does not meet anyone
  EXPECT_EQ(launcher_device(env), 0);
  const auto comm = make_nccl_communicator(env, *backend, kTimeoutSeconds);
  EXPECT_EQ(comm->size(), 1);
  constexpr size_t kCount = 4096;
  Buffer send(*backend, kCount * sizeof(float));
  Buffer recv(*backend, kCount * sizeof(float));
  exchange_round(*comm, send, recv, kCount, 6.0f, /*drop=*/false);
}

#if defined(RINGPACK_TEST_HAS_NCCL_H)
TEST_F(NcclSingleRank, BorrowedCommunicatorStaysWithItsOwner) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // the backend's device (BackendOptions{})
  ncclComm_t raw = nullptr;
  ASSERT_EQ(ncclCommInitRank(&raw, 1, id, 0), ncclSuccess);
  constexpr size_t kCount = 2048;
  Buffer send(*backend, kCount * sizeof(float));
  Buffer recv(*backend, kCount * sizeof(float));
  {
    const auto comm = borrow_nccl_communicator(raw, *backend, kTimeoutSeconds);
    EXPECT_EQ(comm->rank(), 0);
    EXPECT_EQ(comm->size(), 1);
    exchange_round(*comm, send, recv, kCount, 2.5f, /*drop=*/false);
    comm->barrier();
  }  // destroyed: the NCCL communicator must survive
  {
    const auto comm = borrow_nccl_communicator(raw, *backend, kTimeoutSeconds);
    exchange_round(*comm, send, recv, kCount, 3.5f, /*drop=*/false);
    comm->abort();  // marks the wrapper unusable only
    EXPECT_THROW(comm->exchange(send.ptr, 0, recv.ptr, 0, kCount * sizeof(float)), Error);
  }
  backend->synchronize();
  int count = 0;
  EXPECT_EQ(ncclCommCount(raw, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  // Still usable by its owner.
  const auto again = borrow_nccl_communicator(raw, *backend, kTimeoutSeconds);
  exchange_round(*again, send, recv, kCount, 5.5f, /*drop=*/false);
  backend->synchronize();
  EXPECT_EQ(ncclCommDestroy(raw), ncclSuccess);
}
#endif

TEST_F(NcclSingleRank, InitWithAMissingRankTimesOut) {
  const NcclUniqueId id = make_nccl_unique_id();
  const auto start = Clock::now();
  try {
    make_nccl_communicator_from_id(id.data(), 0, 2, *backend, /*timeout_seconds=*/2.0);
    FAIL() << "rank 1 never joins: the initialisation must time out";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "rank 0: NCCL initialisation (rank 0 of 2 on CUDA device"))
        << error.what();
    EXPECT_TRUE(contains(error.what(), "did not finish within 2 s")) << error.what();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 30.0) << "the abort after the deadline must return promptly";
}

// ---- several processes on one GPU ---------------------------------------------------------------

constexpr const char* kChildScenario = "RINGPACK_TEST_NCCL_CHILD";
constexpr const char* kChildResult = "RINGPACK_TEST_NCCL_RESULT";

void write_result(const std::string& text) {
  std::ofstream(std::getenv(kChildResult)) << text;
}

// The ring, collectives and barrier of a launched rank.
void child_ring() {
  const std::optional<LauncherEnv> env = read_launcher_env();
  RINGPACK_CHECK(env.has_value(), "child: no launcher environment");
  BackendOptions options;
  options.device = launcher_device(*env);
  const auto backend = make_backend(BackendKind::kCuda, options);
  const auto comm = make_nccl_communicator(*env, *backend, kTimeoutSeconds);
  const int rank = comm->rank();
  const int size = comm->size();
  RINGPACK_CHECK(rank == env->rank && size == env->world_size, "child: rank ", rank, " of ", size,
                 ", launched as ", describe(*env));
  const int next = (rank + 1) % size;
  const int prev = (rank + size - 1) % size;

  constexpr size_t kCount = size_t{1} << 20;
  Buffer send(*backend, kCount * sizeof(float));
  Buffer recv(*backend, kCount * sizeof(float));
  for (int round = 0; round < 3; ++round) {
    upload(*backend, send.ptr, pattern(rank, round, kCount));
    backend->fill(recv.f32(), kCount, -1.0f);
    auto request = comm->exchange(send.ptr, next, recv.ptr, prev, kCount * sizeof(float));
    request->wait();
    const std::string difference =
        first_difference(download<float>(*backend, recv.ptr, kCount), pattern(prev, round, kCount));
    RINGPACK_CHECK(difference.empty(), "rank ", rank, " round ", round,
                   ": ring exchange: ", difference);
  }

  constexpr size_t kChunk = 1001;
  Buffer gather_send(*backend, kChunk * sizeof(float));
  Buffer gather_recv(*backend, size_t(size) * kChunk * sizeof(float));
  upload(*backend, gather_send.ptr, pattern(rank, 7, kChunk));
  comm->all_gather(gather_send.ptr, gather_recv.ptr, kChunk * sizeof(float));
  const std::vector<float> gathered =
      download<float>(*backend, gather_recv.ptr, size_t(size) * kChunk);
  for (int p = 0; p < size; ++p) {
    const std::vector<float> chunk(gathered.begin() + ptrdiff_t(size_t(p) * kChunk),
                                   gathered.begin() + ptrdiff_t(size_t(p + 1) * kChunk));
    const std::string difference = first_difference(chunk, pattern(p, 7, kChunk));
    RINGPACK_CHECK(difference.empty(), "rank ", rank, ": all_gather chunk of rank ", p, ": ",
                   difference);
  }

  // send[d][i] = (rank + 1) * (d + 1) + i % 5: the sum over ranks is exact.
  std::vector<float> scatter(size_t(size) * kChunk);
  for (int d = 0; d < size; ++d) {
    for (size_t i = 0; i < kChunk; ++i) {
      scatter[size_t(d) * kChunk + i] = float((rank + 1) * (d + 1) + int(i % 5));
    }
  }
  std::vector<float> expected(kChunk);
  for (size_t i = 0; i < kChunk; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < size; ++r) sum += float((r + 1) * (rank + 1) + int(i % 5));
    expected[i] = sum;
  }
  Buffer scatter_send(*backend, scatter.size() * sizeof(float));
  Buffer scatter_recv(*backend, kChunk * sizeof(float));
  upload(*backend, scatter_send.ptr, scatter);
  comm->reduce_scatter_sum(scatter_send.f32(), scatter_recv.f32(), kChunk);
  const std::string difference =
      first_difference(download<float>(*backend, scatter_recv.ptr, kChunk), expected);
  RINGPACK_CHECK(difference.empty(), "rank ", rank, ": reduce_scatter_sum: ", difference);

  comm->barrier();
  comm->check_failures();
  RINGPACK_CHECK(comm->bytes_sent() > 0, "rank ", rank, ": bytes_sent() stayed 0");
}

// Runs only as a child of NcclProcesses (this binary, started with kChildScenario set).
TEST(NcclChild, Run) {
  const char* scenario = std::getenv(kChildScenario);
  if (scenario == nullptr) GTEST_SKIP() << "runs as a child process of the NcclProcesses tests";
  try {
    if (std::string(scenario) == "ring") {
      child_ring();
      write_result("ok");
    } else {
      const std::optional<LauncherEnv> env = read_launcher_env();
      RINGPACK_CHECK(env.has_value(), "child: no launcher environment");
      BackendOptions options;
      options.device = launcher_device(*env);
      const auto backend = make_backend(BackendKind::kCuda, options);
      make_nccl_communicator(*env, *backend, kTimeoutSeconds);
      write_result("no error");
    }
  } catch (const std::exception& error) {
    write_result(error.what());
  }
}

// The path of this test binary.
std::string self_path() {
  char path[4096] = {};
  const ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return length > 0 ? std::string(path, size_t(length)) : std::string();
}

// A TCP port that was free a moment ago (bound to port 0, read back, closed).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

class NcclProcesses : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
    char pattern_dir[] = "/tmp/ringpack_nccl_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern_dir), nullptr);
    dir_ = pattern_dir;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts `size` ranks of this binary in `scenario`, each with the launcher variables of a
  // one-node torchrun launch sharing GPU 0 (LOCAL_RANK 0 of 1: NCCL_HOSTID makes each rank its
  // own "host"), waits for them (killing the ones left after a deadline) and returns each rank's
  // result.
  std::vector<std::string> run(const std::string& scenario, int size, bool own_host_ids) {
    const std::string exe = self_path();
    const int port = free_port();  // the rendezvous listens on MASTER_PORT + 1
    std::vector<pid_t> pids;
    std::vector<std::string> results;
    for (int rank = 0; rank < size; ++rank) {
      const std::string result = dir_ + "/rank" + std::to_string(rank);
      results.push_back(result);
      std::map<std::string, std::string> vars;
      vars[kChildScenario] = scenario;
      vars[kChildResult] = result;
      vars["RANK"] = std::to_string(rank);
      vars["WORLD_SIZE"] = std::to_string(size);
      vars["LOCAL_RANK"] = "0";
      vars["LOCAL_WORLD_SIZE"] = "1";
      vars["MASTER_ADDR"] = "127.0.0.1";
      vars["MASTER_PORT"] = std::to_string(port - 1);
      vars["NCCL_SOCKET_IFNAME"] = "lo";
      vars["NCCL_IB_DISABLE"] = "1";
      vars["NCCL_NVLS_ENABLE"] = "0";
      if (own_host_ids) vars["NCCL_HOSTID"] = "ringpack-test-rank" + std::to_string(rank);
      std::vector<std::string> entries;
      for (char** entry = environ; *entry != nullptr; ++entry) {
        const std::string text(*entry);
        const std::string name = text.substr(0, text.find('='));
        if (vars.count(name) == 0 && name != "NCCL_HOSTID") entries.push_back(text);
      }
      for (const auto& [name, value] : vars) entries.push_back(name + "=" + value);
      std::vector<char*> envp;
      for (std::string& entry : entries) envp.push_back(entry.data());
      envp.push_back(nullptr);
      std::string filter = "--gtest_filter=NcclChild.Run";
      std::vector<char*> argv{const_cast<char*>(exe.c_str()), filter.data(), nullptr};
      pid_t pid = 0;
      const int spawned =
          ::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
      EXPECT_EQ(spawned, 0) << "could not start rank " << rank << " (" << exe << ")";
      if (spawned == 0) pids.push_back(pid);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(180);
    for (const pid_t pid : pids) {
      int status = 0;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          ADD_FAILURE() << "child " << pid << " still runs after 180 s: killed";
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    std::vector<std::string> texts;
    for (const std::string& path : results) {
      std::ifstream file(path);
      std::stringstream text;
      text << file.rdbuf();
      texts.push_back(file ? text.str() : "(no result: the child did not finish)");
    }
    return texts;
  }

  std::string dir_;
};

TEST_F(NcclProcesses, TwoRanksShareOneGpuWithTheirOwnHostIds) {
  const std::vector<std::string> results = run("ring", 2, /*own_host_ids=*/true);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r], "ok") << "rank " << r;
}

TEST_F(NcclProcesses, FourRanksShareOneGpuWithTheirOwnHostIds) {
  const std::vector<std::string> results = run("ring", 4, /*own_host_ids=*/true);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r], "ok") << "rank " << r;
}

TEST_F(NcclProcesses, TwoRanksOnOneGpuWithoutHostIdsGetAClearError) {
  const std::vector<std::string> results = run("init", 2, /*own_host_ids=*/false);
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(contains(results[r], "2 ranks on 1 GPU: ranks 0 and 1 drive GPU"))
        << "rank " << r << ": " << results[r];
    EXPECT_TRUE(contains(results[r], "NCCL_HOSTID")) << "rank " << r << ": " << results[r];
  }
}

}  // namespace
}  // namespace ringpack::testing
