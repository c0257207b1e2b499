// The device communicator (src/comm/device_communicator.h): virtual CP ranks of one GPU as host
// threads, each with its own CUDA backend (its own compute stream) and a communicator of one
// DeviceWorld. Label gpu; every test skips without a device.
//
// Ordering is checked through data, never through host synchronisation between the calls: the
// compute stream writes a send buffer with kernels right before the post and overwrites it right
// after the wait or collective, and reads a receive buffer right after the wait, so a missing
// "ready" event (transfer stream behind the poster's compute stream) or "done" event (compute
// stream behind the copy) shows as wrong values. Failures: a rank that throws, returns without
// posting, or never posts releases its peers (AbortedError / Error) well within the timeout.
// The CP schedules over the device communicator match the host-staged communicator value for
// value (deterministic backend) and cp = 1 within bf16 rounding.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/device_communicator.h"
#include "comm/in_process.h"  // AbortedError
#include "comm/staging_communicator.h"
#include "cp/device_buffer.h"
#include "gpu_test_support.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/cp.h"
#include "ringpack/dtype.h"
#include "ringpack/error.h"
#include "ringpack/job.h"

namespace ringpack::testing {
namespace {

using Clock = std::chrono::steady_clock;
using BackendBuffer = ::ringpack::DeviceBuffer;  // memory of a rank's backend (stream-ordered)
using RankBody = std::function<void(int rank, AttentionBackend& backend, Communicator& comm)>;

constexpr double kTimeout = 60.0;  // of the worlds whose ranks all behave
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class DeviceCommunicator : public GpuTest {};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What one rank of run_device_ranks threw.
struct RankOutcome {
  std::string error;     // what() of the exception; empty when the rank returned
  bool aborted = false;  // it was an AbortedError (released by a failed peer)
};

// Runs body(rank, backend, comm) on `size` threads, each with its own CUDA backend and the
// device communicator of `rank` in one world (as for_each_rank does). A rank whose body throws
// aborts its communicator (its peers stop waiting), like run_guarded.
std::vector<RankOutcome> run_device_ranks(int size, double timeout, const RankBody& body,
                                          const BackendOptions& options = {}) {
  const std::shared_ptr<DeviceWorld> world = make_device_world(size, timeout);
  std::vector<RankOutcome> outcomes(size_t(size), RankOutcome{});
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      RankOutcome& outcome = outcomes[size_t(rank)];
      try {
        const auto backend = make_backend(BackendKind::kCuda, options);
        const auto comm = make_device_communicator(world, rank, *backend);  // dies first
        try {
          body(rank, *backend, *comm);
        } catch (...) {
          comm->abort();
          throw;
        }
      } catch (const AbortedError& e) {
        outcome.error = e.what();
        outcome.aborted = true;
      } catch (const std::exception& e) {
        outcome.error = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

void expect_ranks_ok(const std::vector<RankOutcome>& outcomes, const std::string& what) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_EQ(outcomes[r].error, "") << what << ", rank " << r;
  }
}

template <class T>
void upload(AttentionBackend& backend, void* dst, const std::vector<T>& host) {
  backend.copy_from_host(dst, host.data(), host.size() * sizeof(T));
}

// Waits for the compute stream (copy_to_host synchronises it), then copies.
template <class T>
std::vector<T> download(AttentionBackend& backend, const void* src, size_t count) {
  std::vector<T> host(count);
  backend.copy_to_host(host.data(), src, count * sizeof(T));
  return host;
}

// Throws Error naming the first difference (bit patterns: NaN only equals the same NaN).
void check_equal(const std::vector<float>& got, const std::vector<float>& expected,
                 const std::string& what) {
  RINGPACK_CHECK(got.size() == expected.size(), what, ": ", got.size(), " values, expected ",
                 expected.size());
  size_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  }
  RINGPACK_CHECK(bad == 0, what, ": ", bad, " of ", got.size(), " values differ, the first at ",
                 first, ": expected ", expected[first], ", got ", got[first]);
}

// Distinct, exactly representable values per (rank, round, index).
std::vector<float> ring_values(int rank, int round, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = float(rank * 100000 + round * 10000 + int(i % 9973));
  return values;
}

// ---- point to point ----------------------------------------------------------------------------

TEST_F(DeviceCommunicator, RingDeliversEveryRanksDataAtSizes1To5) {
  constexpr size_t kCount = 4099;  // not a multiple of 4
  constexpr size_t kBytes = kCount * sizeof(float);
  constexpr int kRounds = 4;
  for (int size = 1; size <= 5; ++size) {
    const auto outcomes = run_device_ranks(
        size, kTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
          RINGPACK_CHECK(comm.rank() == rank && comm.size() == size, "rank/size");
          RINGPACK_CHECK(comm.stream() != nullptr && comm.stream() != backend.stream(),
                         "the transfer stream must be the communicator's own");
          const int next = (rank + 1) % size;
          const int prev = (rank + size - 1) % size;
          BackendBuffer send(backend, kBytes);
          BackendBuffer recv(backend, kBytes);
          for (int round = 0; round < kRounds; ++round) {
            upload(backend, send.data(), ring_values(rank, round, kCount));
            backend.fill(recv.as<float>(), kCount, kNaN);
            if (round % 2 == 0) {
              const auto request = comm.exchange(send.data(), next, recv.data(), prev, kBytes);
              request->wait();
              request->wait();  // idempotent
            } else {
              const auto receive = comm.irecv(recv.data(), kBytes, prev);
              const auto send_request = comm.isend(send.data(), kBytes, next);
              send_request->wait();
              receive->wait();
            }
            check_equal(download<float>(backend, recv.data(), kCount),
                        ring_values(prev, round, kCount),
                        "round " + std::to_string(round) + " from rank " + std::to_string(prev));
          }
          RINGPACK_CHECK(comm.bytes_sent() == kRounds * kBytes, "bytes_sent ", comm.bytes_sent(),
                         ", expected ", kRounds * kBytes);
          comm.check_failures();
        });
    expect_ranks_ok(outcomes, "size " + std::to_string(size));
  }
}

// The compute stream is kept busy with kernels that write the send buffer (the last one writes the
// value sent) and poison the receive buffer just before the post; right after the wait it copies
// the received data away and the next round's kernels overwrite both buffers. No host
// synchronisation until the end: only the ready and done events order these.
TEST_F(DeviceCommunicator, ReadyAndDoneEventsOrderCopiesAgainstBusyComputeStreams) {
  constexpr size_t kCount = size_t(16) << 20;  // 64 MiB per buffer
  constexpr size_t kBytes = kCount * sizeof(float);
  constexpr int kRounds = 4;
  constexpr int kFills = 16;
  const auto value = [](int rank, int round) { return float(1000 * (rank + 1) + round); };
  for (int size : {2, 4}) {
    const auto outcomes = run_device_ranks(
        size, kTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
          const int next = (rank + 1) % size;
          const int prev = (rank + size - 1) % size;
          BackendBuffer send(backend, kBytes);
          BackendBuffer recv(backend, kBytes);
          BackendBuffer kept(backend, kRounds * kBytes);
          for (int round = 0; round < kRounds; ++round) {
            for (int f = 0; f < kFills; ++f) backend.fill(send.as<float>(), kCount, -float(f + 1));
            backend.fill(send.as<float>(), kCount, value(rank, round));
            backend.fill(recv.as<float>(), kCount, kNaN);  // queued work the copy must follow
            const auto request = comm.exchange(send.data(), next, recv.data(), prev, kBytes);
            request->wait();
            backend.copy(kept.at(size_t(round) * kBytes), recv.data(), kBytes);
          }
          backend.synchronize();
          for (int round = 0; round < kRounds; ++round) {
            check_equal(download<float>(backend, kept.at(size_t(round) * kBytes), kCount),
                        std::vector<float>(kCount, value(prev, round)),
                        "round " + std::to_string(round) + " from rank " + std::to_string(prev));
          }
        });
    expect_ranks_ok(outcomes, "size " + std::to_string(size));
  }
}

// The receive's request returns (start, end) marks of the copy on the receiver's transfer stream;
// a lone send's request returns none; set_timeline(nullptr) stops marking.
TEST_F(DeviceCommunicator, TimelineMarksBracketTheCopyOnTheReceiversTransferStream) {
  constexpr size_t kCount = size_t(8) << 20;
  constexpr size_t kBytes = kCount * sizeof(float);
  const auto outcomes =
      run_device_ranks(2, kTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
        const int peer = 1 - rank;
        BackendBuffer send(backend, kBytes);
        BackendBuffer recv(backend, kBytes);
        backend.fill(send.as<float>(), kCount, float(rank));
        const std::unique_ptr<Timeline> timeline = backend.make_timeline();
        const size_t origin = timeline->mark(backend.stream());
        comm.set_timeline(timeline.get());
        const auto exchange = comm.exchange(send.data(), peer, recv.data(), peer, kBytes);
        const auto marks = exchange->marks();
        RINGPACK_CHECK(marks.has_value(), "an exchange's request must return the receive's marks");
        exchange->wait();
        const auto lone_send = comm.isend(send.data(), kBytes, peer);
        const auto lone_recv = comm.irecv(recv.data(), kBytes, peer);
        RINGPACK_CHECK(!lone_send->marks().has_value(), "a send's request returns no marks");
        const auto recv_marks = lone_recv->marks();
        RINGPACK_CHECK(recv_marks.has_value(), "a receive's request must return marks");
        lone_send->wait();
        lone_recv->wait();
        comm.set_timeline(nullptr);
        const auto untimed = comm.irecv(recv.data(), kBytes, peer);
        const auto untimed_send = comm.isend(send.data(), kBytes, peer);
        RINGPACK_CHECK(!untimed->marks().has_value(), "no timeline, no marks");
        untimed->wait();
        untimed_send->wait();
        backend.synchronize();  // the compute stream waited on every copy
        for (const auto& span : {*marks, *recv_marks}) {
          const double start = timeline->seconds(span.first) - timeline->seconds(origin);
          const double end = timeline->seconds(span.second) - timeline->seconds(origin);
          RINGPACK_CHECK(start >= 0.0 && end > start, "transfer span [", start, ", ", end,
                         "] s must follow the origin and have a length");
        }
        check_equal(download<float>(backend, recv.data(), kCount),
                    std::vector<float>(kCount, float(peer)), "received data");
      });
  expect_ranks_ok(outcomes, "timeline");
}

// ---- collectives -------------------------------------------------------------------------------

TEST_F(DeviceCommunicator, AllGatherPlacesEveryRanksChunkAtSizes1To5) {
  constexpr size_t kCount = 1001;
  constexpr size_t kBytes = kCount * sizeof(float);
  const auto second_value = [](int rank) { return 0.5f * float(rank + 1); };
  for (int size = 1; size <= 5; ++size) {
    const auto outcomes = run_device_ranks(
        size, kTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
          BackendBuffer send(backend, kBytes);
          BackendBuffer first(backend, size_t(size) * kBytes);
          BackendBuffer second(backend, size_t(size) * kBytes);
          backend.fill(first.as<float>(), size_t(size) * kCount, kNaN);
          backend.fill(second.as<float>(), size_t(size) * kCount, kNaN);
          upload(backend, send.data(), ring_values(rank, 0, kCount));
          comm.all_gather(send.data(), first.data(), kBytes);
          // Written by a kernel right after the first gather and right before the second one, and
          // overwritten right after it: the peers' copies must read exactly the value in between.
          backend.fill(send.as<float>(), kCount, second_value(rank));
          comm.all_gather(send.data(), second.data(), kBytes);
          backend.fill(send.as<float>(), kCount, -7.0f);
          std::vector<float> expected_first;
          std::vector<float> expected_second;
          for (int p = 0; p < size; ++p) {
            const auto values = ring_values(p, 0, kCount);
            expected_first.insert(expected_first.end(), values.begin(), values.end());
            expected_second.insert(expected_second.end(), kCount, second_value(p));
          }
          check_equal(download<float>(backend, first.data(), size_t(size) * kCount), expected_first,
                      "first all_gather");
          check_equal(download<float>(backend, second.data(), size_t(size) * kCount),
                      expected_second, "second all_gather");
          RINGPACK_CHECK(comm.bytes_sent() == 2 * size_t(size - 1) * kBytes, "bytes_sent ",
                         comm.bytes_sent());
        });
    expect_ranks_ok(outcomes, "size " + std::to_string(size));
  }
}

// Values of mixed magnitudes, so that the order of the additions shows in the result: every rank
// must sum in rank order (chunk of rank 0 + chunk of rank 1 + ...), bit for bit.
TEST_F(DeviceCommunicator, ReduceScatterSumAddsInRankOrderAtSizes1To5) {
  for (int size = 1; size <= 5; ++size) {
    for (size_t count : {size_t(1027), size_t(4096)}) {
      std::vector<std::vector<float>> sends(static_cast<size_t>(size));  // [rank][size * count]
      std::mt19937_64 engine(seed_from_test_name() + uint64_t(size) * 7919u + count);
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      std::uniform_int_distribution<int> exponent(-12, 12);
      for (auto& send : sends) {
        send.resize(size_t(size) * count);
        for (float& x : send) x = std::ldexp(uniform(engine), exponent(engine));
      }
      const auto expected = [&](int rank) {
        std::vector<float> sum(sends[0].begin() + ptrdiff_t(size_t(rank) * count),
                               sends[0].begin() + ptrdiff_t(size_t(rank + 1) * count));
        for (int q = 1; q < size; ++q) {
          for (size_t i = 0; i < count; ++i) sum[i] += sends[size_t(q)][size_t(rank) * count + i];
        }
        return sum;
      };
      const auto outcomes = run_device_ranks(
          size, kTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
            BackendBuffer send(backend, size_t(size) * count * sizeof(float));
            BackendBuffer recv(backend, count * sizeof(float));
            upload(backend, send.data(), sends[size_t(rank)]);
            backend.fill(recv.as<float>(), count, kNaN);
            comm.reduce_scatter_sum(send.as<float>(), recv.as<float>(), count);
            backend.fill(send.as<float>(), size_t(size) * count,
                         1e30f);  // right after: peers read first
            check_equal(download<float>(backend, recv.data(), count), expected(rank),
                        "reduce_scatter_sum of " + std::to_string(count));
          });
      expect_ranks_ok(outcomes, "size " + std::to_string(size) + " count " + std::to_string(count));
    }
  }
}

TEST_F(DeviceCommunicator, BarrierReturnsOnEveryRankAndAfterTheTransfers) {
  constexpr size_t kCount = size_t(4) << 20;
  constexpr size_t kBytes = kCount * sizeof(float);
  for (int size : {1, 3, 4}) {
    const auto outcomes = run_device_ranks(
        size, kTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
          BackendBuffer send(backend, kBytes);
          BackendBuffer recv(backend, kBytes);
          backend.fill(send.as<float>(), kCount, float(rank));
          const auto request = comm.exchange(send.data(), (rank + 1) % size, recv.data(),
                                             (rank + size - 1) % size, kBytes);
          comm.barrier();
          // The barrier drained this rank's transfer stream: the copy into recv ran.
          const cudaError_t status =
              cudaStreamQuery(static_cast<cudaStream_t>(comm.stream()));  // never blocks
          RINGPACK_CHECK(
              status == cudaSuccess,
              "the transfer stream is not idle after the barrier: ", cudaGetErrorString(status));
          request->wait();
          comm.barrier();
          comm.barrier();
          check_equal(download<float>(backend, recv.data(), kCount),
                      std::vector<float>(kCount, float((rank + size - 1) % size)), "received data");
        });
    expect_ranks_ok(outcomes, "size " + std::to_string(size));
  }
}

// ---- failures ----------------------------------------------------------------------------------

constexpr double kFailureTimeout = 30.0;
constexpr double kPrompt = 10.0;  // released well within kFailureTimeout

TEST_F(DeviceCommunicator, RankFailingBeforePostingReleasesTheOthersPromptly) {
  constexpr size_t kBytes = 4096;
  std::vector<double> waited(3, 0.0);
  const auto outcomes = run_device_ranks(
      3, kFailureTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
        if (rank == 1) RINGPACK_FAIL("rank 1 fails before posting");
        BackendBuffer send(backend, kBytes);
        BackendBuffer recv(backend, kBytes);
        const auto start = Clock::now();
        try {
          const auto request =
              comm.exchange(send.data(), (rank + 1) % 3, recv.data(), (rank + 2) % 3, kBytes);
          request->wait();
        } catch (...) {
          waited[size_t(rank)] = seconds_since(start);
          throw;
        }
      });
  EXPECT_EQ(outcomes[1].error, "rank 1 fails before posting");
  EXPECT_FALSE(outcomes[1].aborted);
  for (int rank : {0, 2}) {
    const RankOutcome& outcome = outcomes[size_t(rank)];
    EXPECT_TRUE(outcome.aborted) << "rank " << rank << ": " << outcome.error;
    EXPECT_NE(outcome.error.find("rank 1 failed"), std::string::npos) << outcome.error;
    EXPECT_LT(waited[size_t(rank)], kPrompt) << "rank " << rank;
  }
}

TEST_F(DeviceCommunicator, PeerReturningWithoutPostingFailsTheWaitPromptly) {
  std::vector<double> waited(2, 0.0);
  const auto outcomes = run_device_ranks(
      2, kFailureTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
        if (rank == 1) return;
        BackendBuffer send(backend, 64);
        const auto start = Clock::now();
        try {
          comm.isend(send.data(), 64, 1)->wait();
        } catch (...) {
          waited[0] = seconds_since(start);
          throw;
        }
      });
  EXPECT_EQ(outcomes[1].error, "");
  EXPECT_FALSE(outcomes[0].aborted) << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("rank 1 returned without posting the irecv"), std::string::npos)
      << outcomes[0].error;
  EXPECT_LT(waited[0], kPrompt);
}

TEST_F(DeviceCommunicator, UnmatchedWaitThrowsAtTheDeadline) {
  constexpr double kShortTimeout = 1.0;
  std::vector<double> waited(2, 0.0);
  const auto outcomes = run_device_ranks(
      2, kShortTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
        if (rank == 1) {  // hangs (for a while) without posting
          std::this_thread::sleep_for(std::chrono::seconds(4));
          return;
        }
        BackendBuffer recv(backend, 64);
        const auto start = Clock::now();
        try {
          comm.irecv(recv.data(), 64, 1)->wait();
        } catch (...) {
          waited[0] = seconds_since(start);
          throw;
        }
      });
  EXPECT_EQ(outcomes[1].error, "");
  EXPECT_NE(outcomes[0].error.find("was not matched within 1 s"), std::string::npos)
      << outcomes[0].error;
  EXPECT_GE(waited[0], 0.9 * kShortTimeout);
  EXPECT_LT(waited[0], 3.5);  // before rank 1 returns: the deadline, not the departure
}

TEST_F(DeviceCommunicator, SizeMismatchNamesBothRanksAndSizes) {
  const auto outcomes = run_device_ranks(
      2, kFailureTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
        BackendBuffer buffer(backend, 200);
        if (rank == 0) {
          comm.isend(buffer.data(), 100, 1)->wait();
        } else {
          comm.irecv(buffer.data(), 200, 0)->wait();
        }
      });
  for (const RankOutcome& outcome : outcomes) {
    EXPECT_FALSE(outcome.aborted) << outcome.error;
    EXPECT_NE(outcome.error.find("isend of 100 bytes from rank 0 matched irecv of 200 bytes on "
                                 "rank 1"),
              std::string::npos)
        << outcome.error;
  }
}

TEST_F(DeviceCommunicator, AbortReleasesABarrierAndFailsCheckFailures) {
  const auto outcomes = run_device_ranks(
      3, kFailureTimeout, [&](int rank, AttentionBackend& backend, Communicator& comm) {
        if (rank == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others are waiting
          comm.abort();                                                 // must not block
          comm.check_failures();                                        // throws
          RINGPACK_FAIL("check_failures did not throw after abort()");
        }
        comm.barrier();
      });
  for (const RankOutcome& outcome : outcomes) EXPECT_TRUE(outcome.aborted) << outcome.error;
  EXPECT_NE(outcomes[0].error.find("rank 2 failed"), std::string::npos) << outcomes[0].error;
}

// ---- the CP schedules over the device communicator ---------------------------------------------

constexpr int kCpBatch = 2;
constexpr int kCpSeqLen = 768;  // divisible by cp = 1..4
constexpr int kCpHeadsQ = 4;
constexpr int kCpHeadsKv = 2;
constexpr int kCpHeadDim = 128;

// Whole rows: bf16 Q, K, V, dO (bit patterns) and int32 segment ids and positions.
struct CpProblem {
  std::vector<uint16_t> q, k, v, dout;
  std::vector<int32_t> segment_ids, positions;
};

// Whole rows of the results, widened to float (lse: [batch, heads_q, S]).
struct CpResults {
  std::vector<float> out, lse, dq, dk, dv;
};

// Packed rows with a 1-token document, documents crossing shard borders and interior padding.
CpProblem make_cp_problem(uint64_t seed) {
  const std::vector<std::vector<int>> docs = {{100, 1, 300, 67, -50, 250}, {384, 200, -184}};
  CpProblem p;
  for (const auto& row : docs) {
    int segment = 0;
    for (int length : row) {
      const bool padding = length < 0;
      if (!padding) ++segment;
      for (int t = 0; t < std::abs(length); ++t) {
        p.segment_ids.push_back(padding ? 0 : segment);
        p.positions.push_back(padding ? 0 : t);
      }
    }
  }
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const auto draw = [&](size_t count) {
    std::vector<uint16_t> x(count);
    for (uint16_t& bits : x) bits = float_to_bf16(uniform(engine));
    return x;
  };
  const size_t tokens = size_t(kCpBatch) * kCpSeqLen;
  p.q = draw(tokens * kCpHeadsQ * kCpHeadDim);
  p.k = draw(tokens * kCpHeadsKv * kCpHeadDim);
  p.v = draw(tokens * kCpHeadsKv * kCpHeadDim);
  p.dout = draw(tokens * kCpHeadsQ * kCpHeadDim);
  return p;
}

// Tokens [r*n, (r+1)*n) of each of `rows` rows of a [rows, S, width] tensor, and back.
template <class T>
std::vector<T> shard_of(const std::vector<T>& whole, int rows, int width, int r, int n) {
  std::vector<T> shard;
  for (int b = 0; b < rows; ++b) {
    const auto begin = whole.begin() + (ptrdiff_t(b) * kCpSeqLen + ptrdiff_t(r) * n) * width;
    shard.insert(shard.end(), begin, begin + ptrdiff_t(n) * width);
  }
  return shard;
}
void place_shard(std::vector<float>& whole, const std::vector<float>& shard, int rows, int width,
                 int r, int n) {
  for (int b = 0; b < rows; ++b) {
    std::copy_n(shard.begin() + ptrdiff_t(b) * n * width, size_t(n) * size_t(width),
                whole.begin() + (ptrdiff_t(b) * kCpSeqLen + ptrdiff_t(r) * n) * width);
  }
}

std::vector<float> widen_bf16(const std::vector<uint16_t>& bits) {
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = bf16_to_float(bits[i]);
  return values;
}

// cp_forward then cp_backward on `rank`'s contiguous shard; its results land in `whole`.
void run_cp_rank(const CpProblem& p, Strategy strategy, int cp, int rank, AttentionBackend& backend,
                 Communicator& comm, CpResults& whole, std::mutex& whole_mutex,
                 std::vector<ScheduleStats>& forward_stats) {
  const int n = kCpSeqLen / cp;
  const int q_width = kCpHeadsQ * kCpHeadDim;
  const int kv_width = kCpHeadsKv * kCpHeadDim;
  const auto to_device = [&](const auto& host) {
    BackendBuffer buffer(backend, host.size() * sizeof(host[0]));
    upload(backend, buffer.data(), host);
    return buffer;
  };
  const BackendBuffer q = to_device(shard_of(p.q, kCpBatch, q_width, rank, n));
  const BackendBuffer k = to_device(shard_of(p.k, kCpBatch, kv_width, rank, n));
  const BackendBuffer v = to_device(shard_of(p.v, kCpBatch, kv_width, rank, n));
  const BackendBuffer dout = to_device(shard_of(p.dout, kCpBatch, q_width, rank, n));
  const BackendBuffer segment_ids = to_device(shard_of(p.segment_ids, kCpBatch, 1, rank, n));
  const BackendBuffer positions = to_device(shard_of(p.positions, kCpBatch, 1, rank, n));
  const size_t q_count = size_t(kCpBatch) * size_t(n) * size_t(q_width);
  const size_t kv_count = size_t(kCpBatch) * size_t(n) * size_t(kv_width);
  const size_t lse_count = size_t(kCpBatch) * kCpHeadsQ * size_t(n);
  const uint16_t poison = 0xFFFF;  // NaN in bf16
  const BackendBuffer out = to_device(std::vector<uint16_t>(q_count, poison));
  const BackendBuffer lse = to_device(std::vector<float>(lse_count, kNaN));
  const BackendBuffer dq = to_device(std::vector<uint16_t>(q_count, poison));
  const BackendBuffer dk = to_device(std::vector<uint16_t>(kv_count, poison));
  const BackendBuffer dv = to_device(std::vector<uint16_t>(kv_count, poison));

  ShardInputs in;
  in.dims = AttentionDims{kCpBatch, n, n, kCpHeadsQ, kCpHeadsKv, kCpHeadDim};
  in.dtype = DType::kBF16;
  in.q = q.data();
  in.k = k.data();
  in.v = v.data();
  in.segment_ids = segment_ids.as<const int32_t>();
  in.positions = positions.as<const int32_t>();
  ScheduleStats forward;
  ScheduleStats backward;
  cp_forward(strategy, in, backend, comm, ForwardOutputs{out.data(), lse.as<float>()}, forward);
  cp_backward(strategy, in, out.data(), lse.as<const float>(), dout.data(), backend, comm,
              BackwardOutputs{dq.data(), dk.data(), dv.data()}, backward);

  const auto out_host = widen_bf16(download<uint16_t>(backend, out.data(), q_count));
  const auto lse_host = download<float>(backend, lse.data(), lse_count);
  const auto dq_host = widen_bf16(download<uint16_t>(backend, dq.data(), q_count));
  const auto dk_host = widen_bf16(download<uint16_t>(backend, dk.data(), kv_count));
  const auto dv_host = widen_bf16(download<uint16_t>(backend, dv.data(), kv_count));
  std::lock_guard<std::mutex> lock(whole_mutex);
  place_shard(whole.out, out_host, kCpBatch, q_width, rank, n);
  place_shard(whole.lse, lse_host, kCpBatch * kCpHeadsQ, 1, rank, n);
  place_shard(whole.dq, dq_host, kCpBatch, q_width, rank, n);
  place_shard(whole.dk, dk_host, kCpBatch, kv_width, rank, n);
  place_shard(whole.dv, dv_host, kCpBatch, kv_width, rank, n);
  forward_stats[size_t(rank)] = std::move(forward);
}

CpResults poisoned_results() {
  const size_t tokens = size_t(kCpBatch) * kCpSeqLen;
  return CpResults{std::vector<float>(tokens * kCpHeadsQ * kCpHeadDim, kNaN),
                   std::vector<float>(tokens * kCpHeadsQ, kNaN),
                   std::vector<float>(tokens * kCpHeadsQ * kCpHeadDim, kNaN),
                   std::vector<float>(tokens * kCpHeadsKv * kCpHeadDim, kNaN),
                   std::vector<float>(tokens * kCpHeadsKv * kCpHeadDim, kNaN)};
}

BackendOptions deterministic_cuda() {
  BackendOptions options;
  options.deterministic = true;  // bit-identical repeated runs: comparable across communicators
  return options;
}

CpResults run_cp_on_device(const CpProblem& p, Strategy strategy, int cp,
                           std::vector<ScheduleStats>& forward_stats) {
  CpResults whole = poisoned_results();
  std::mutex whole_mutex;
  forward_stats.assign(size_t(cp), ScheduleStats{});
  const auto outcomes = run_device_ranks(
      cp, kTimeout,
      [&](int rank, AttentionBackend& backend, Communicator& comm) {
        run_cp_rank(p, strategy, cp, rank, backend, comm, whole, whole_mutex, forward_stats);
      },
      deterministic_cuda());
  expect_ranks_ok(outcomes, std::string("device communicator, ") + strategy_name(strategy) +
                                " cp=" + std::to_string(cp));
  return whole;
}

CpResults run_cp_staged(const CpProblem& p, Strategy strategy, int cp) {
  CpResults whole = poisoned_results();
  std::mutex whole_mutex;
  std::vector<ScheduleStats> forward_stats(static_cast<size_t>(cp));
  run_in_process(
      cp,
      [&](Communicator& host) {
        const auto backend = make_backend(BackendKind::kCuda, deterministic_cuda());
        StagingCommunicator comm(host, *backend);
        run_cp_rank(p, strategy, cp, host.rank(), *backend, comm, whole, whole_mutex,
                    forward_stats);
      },
      kTimeout);
  return whole;
}

void expect_no_nan(const std::vector<float>& x, const std::string& what) {
  size_t nans = 0;
  for (float value : x) nans += std::isnan(value) ? 1 : 0;
  EXPECT_EQ(nans, 0u) << what << ": " << nans << " entries never written (or NaN)";
}

// Equal values entry by entry (+0 equals -0: the host-staged reduce_scatter_sum starts its sums
// from +0, the device one from the chunk of rank 0).
void expect_equal_values(const std::vector<float>& got, const std::vector<float>& expected,
                         const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  size_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = got[i] == expected[i] || (std::isnan(got[i]) && std::isnan(expected[i]));
    if (!same && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " differ, the first at "
                     << first << ": expected " << expected[first] << ", got " << got[first];
}

// ||got - ref|| / ||ref|| over entries finite on both sides; the same infinity on both sides is
// equal, one-sided non-finite entries fail.
void expect_rel_close(const std::vector<float>& got, const std::vector<float>& ref,
                      double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double diff = 0.0;
  double norm = 0.0;
  size_t one_sided = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(got[i]) && std::isfinite(ref[i])) {
      diff += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
      norm += double(ref[i]) * ref[i];
    } else if (!(got[i] == ref[i])) {
      ++one_sided;
    }
  }
  EXPECT_EQ(one_sided, 0u) << what << ": entries non-finite on one side only";
  const double rel = norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  EXPECT_LE(rel, tolerance) << what;
}

TEST_F(DeviceCommunicator, CpSchedulesMatchStagedRanksExactlyAndCp1WithinRounding) {
  const CpProblem p = make_cp_problem(seed_from_test_name());
  for (Strategy strategy : {Strategy::kRing, Strategy::kAllGather}) {
    std::vector<ScheduleStats> stats;
    const CpResults single = run_cp_on_device(p, strategy, 1, stats);
    for (int cp : {2, 3, 4}) {
      const std::string what = std::string(strategy_name(strategy)) + " cp=" + std::to_string(cp);
      const CpResults device = run_cp_on_device(p, strategy, cp, stats);
      const CpResults staged = run_cp_staged(p, strategy, cp);
      const auto each = [&](auto&& fn) {
        fn(device.out, staged.out, single.out, "O", 2e-2);
        fn(device.lse, staged.lse, single.lse, "LSE", 1e-4);
        fn(device.dq, staged.dq, single.dq, "dQ", 2e-2);
        fn(device.dk, staged.dk, single.dk, "dK", 2e-2);
        fn(device.dv, staged.dv, single.dv, "dV", 2e-2);
      };
      each([&](const std::vector<float>& got, const std::vector<float>& same_cp,
               const std::vector<float>& cp1, const char* name, double tolerance) {
        expect_no_nan(got, what + " " + name);
        expect_equal_values(got, same_cp, what + " " + name + " vs staged ranks");
        expect_rel_close(got, cp1, tolerance, what + " " + name + " vs cp=1");
      });
      if (strategy == Strategy::kRing) {  // each exchange's receive returned its marks
        for (int r = 0; r < cp; ++r) {
          int transfers = 0;
          for (const TraceSpan& span : stats[size_t(r)].spans) {
            if (span.lane != TraceSpan::Lane::kTransfer) continue;
            ++transfers;
            EXPECT_LE(span.start_seconds, span.end_seconds) << what << " rank " << r;
          }
          EXPECT_EQ(transfers, cp - 1) << what << " rank " << r << ": forward kv transfer spans";
        }
      }
    }
  }
}

// The whole run (shard, reorder, CP forward and backward, verify against the fp64 reference) with
// the device communicator at cp 2, 4 and 8, both strategies.
TEST_F(DeviceCommunicator, RunJobPassesAtCp2And4And8) {
  for (int cp : {2, 4, 8}) {
    for (Strategy strategy : {Strategy::kRing, Strategy::kAllGather}) {
      RunOptions options;  // the default batch: packed 4096-token row, bf16
      options.batch.cp = cp;
      options.batch.strategy = strategy;
      options.backend = BackendKind::kCuda;
      options.comm = CommKind::kDevice;
      options.comm_timeout_seconds = kTimeout;
      options.verify = true;
      const RunReport report = run_job(options);
      EXPECT_EQ(report.comm, "device");
      EXPECT_TRUE(report.verified && report.passed)
          << strategy_name(strategy) << " cp=" << cp << ": " << report.errors.size()
          << " tensors compared";
    }
  }
}

}  // namespace
}  // namespace ringpack::testing
