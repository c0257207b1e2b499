// The in-process communicator (src/comm/in_process.h): point-to-point matching and FIFO order,
// collectives, byte counts, size mismatches, failure propagation without deadlock, and transfers
// that progress while the sending rank is busy.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/in_process.h"
#include "ringpack/comm.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

constexpr int kMaxWorldSize = 5;
constexpr size_t kMessageFloats = 7;

// A value that names the sending rank, the message and the element.
float message_value(int src, int message, size_t i) {
  return float(src * 1000 + message * 100) + float(i);
}

TEST(InProcessComm, RingExchangeForSizesOneToFive) {
  for (int size = 1; size <= kMaxWorldSize; ++size) {
    std::vector<std::vector<float>> received(static_cast<size_t>(size));
    run_in_process(size, [&](Communicator& comm) {
      const int r = comm.rank();
      EXPECT_EQ(comm.size(), size);
      std::vector<float> send(kMessageFloats);
      for (size_t i = 0; i < send.size(); ++i) send[i] = message_value(r, 0, i);
      std::vector<float> recv(kMessageFloats, std::nanf(""));
      auto recv_request =
          comm.irecv(recv.data(), recv.size() * sizeof(float), (r + size - 1) % size);
      auto send_request = comm.isend(send.data(), send.size() * sizeof(float), (r + 1) % size);
      send_request->wait();
      recv_request->wait();
      recv_request->wait();  // idempotent
      received[size_t(r)] = recv;
      EXPECT_EQ(comm.bytes_sent(), kMessageFloats * sizeof(float));
    });
    for (int r = 0; r < size; ++r) {
      const int src = (r + size - 1) % size;
      for (size_t i = 0; i < kMessageFloats; ++i) {
        EXPECT_EQ(received[size_t(r)][i], message_value(src, 0, i))
            << "size " << size << " rank " << r << " element " << i;
      }
    }
  }
}

TEST(InProcessComm, MessagesOfOnePairMatchInPostingOrder) {
  constexpr int kMessages = 4;
  std::vector<std::vector<float>> received(kMessages);
  run_in_process(2, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      std::vector<std::vector<float>> sends(kMessages, std::vector<float>(kMessageFloats));
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (int m = 0; m < kMessages; ++m) {
        for (size_t i = 0; i < kMessageFloats; ++i) sends[size_t(m)][i] = message_value(0, m, i);
        requests.push_back(comm.isend(sends[size_t(m)].data(), kMessageFloats * sizeof(float), 1));
      }
      comm.barrier();  // every send is posted before any recv
      for (auto& request : requests) request->wait();
    } else {
      comm.barrier();
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (int m = 0; m < kMessages; ++m) {
        received[size_t(m)].assign(kMessageFloats, std::nanf(""));
        requests.push_back(
            comm.irecv(received[size_t(m)].data(), kMessageFloats * sizeof(float), 0));
      }
      for (auto& request : requests) request->wait();
    }
  });
  for (int m = 0; m < kMessages; ++m) {
    for (size_t i = 0; i < kMessageFloats; ++i) {
      EXPECT_EQ(received[size_t(m)][i], message_value(0, m, i)) << "message " << m;
    }
  }
}

TEST(InProcessComm, AllGatherPlacesRankRAtOffsetR) {
  for (int size = 1; size <= kMaxWorldSize; ++size) {
    run_in_process(size, [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<float> send(kMessageFloats);
      for (size_t i = 0; i < send.size(); ++i) send[i] = message_value(r, 0, i);
      std::vector<float> recv(size_t(size) * kMessageFloats, std::nanf(""));
      comm.all_gather(send.data(), recv.data(), kMessageFloats * sizeof(float));
      for (int src = 0; src < size; ++src) {
        for (size_t i = 0; i < kMessageFloats; ++i) {
          EXPECT_EQ(recv[size_t(src) * kMessageFloats + i], message_value(src, 0, i))
              << "size " << size << " rank " << r << " from " << src;
        }
      }
      EXPECT_EQ(comm.bytes_sent(), uint64_t(size - 1) * kMessageFloats * sizeof(float));
    });
  }
}

TEST(InProcessComm, ReduceScatterSumsEachRanksChunk) {
  for (int size = 1; size <= kMaxWorldSize; ++size) {
    run_in_process(size, [&](Communicator& comm) {
      const int r = comm.rank();
      // send[dst][i] = value from rank r for rank dst
      std::vector<float> send(size_t(size) * kMessageFloats);
      for (int dst = 0; dst < size; ++dst) {
        for (size_t i = 0; i < kMessageFloats; ++i) {
          send[size_t(dst) * kMessageFloats + i] = message_value(r, dst, i);
        }
      }
      std::vector<float> recv(kMessageFloats, std::nanf(""));
      comm.reduce_scatter_sum(send.data(), recv.data(), kMessageFloats);
      for (size_t i = 0; i < kMessageFloats; ++i) {
        float expected = 0.0f;
        for (int src = 0; src < size; ++src) expected += message_value(src, r, i);
        EXPECT_EQ(recv[i], expected) << "size " << size << " rank " << r << " element " << i;
      }
      EXPECT_EQ(comm.bytes_sent(), uint64_t(size - 1) * kMessageFloats * sizeof(float));
    });
  }
}

TEST(InProcessComm, BarrierHoldsEveryRankUntilAllArrive) {
  for (int size = 1; size <= kMaxWorldSize; ++size) {
    std::atomic<int> arrived{0};
    run_in_process(size, [&](Communicator& comm) {
      constexpr int kRounds = 3;
      for (int round = 0; round < kRounds; ++round) {
        arrived.fetch_add(1);
        comm.barrier();
        EXPECT_GE(arrived.load(), (round + 1) * size);
        comm.barrier();
      }
    });
  }
}

TEST(InProcessComm, MismatchedSizesThrowNamingBothSides) {
  try {
    run_in_process(2, [](Communicator& comm) {
      std::vector<float> data(kMessageFloats);
      if (comm.rank() == 0) {
        comm.isend(data.data(), kMessageFloats * sizeof(float), 1)->wait();
      } else {
        comm.irecv(data.data(), (kMessageFloats - 1) * sizeof(float), 0)->wait();
      }
    });
    FAIL() << "expected a size mismatch error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(std::to_string(kMessageFloats * sizeof(float)) + " bytes from rank 0"),
              std::string::npos)
        << message;
    EXPECT_NE(
        message.find(std::to_string((kMessageFloats - 1) * sizeof(float)) + " bytes on rank 1"),
        std::string::npos)
        << message;
  }
}

TEST(InProcessComm, ThrowingRankReleasesOthersAndItsErrorIsRethrown) {
  constexpr int kSize = 4;
  constexpr int kFailingRank = 2;
  std::atomic<int> aborted{0};
  try {
    run_in_process(kSize, [&](Communicator& comm) {
      const int r = comm.rank();
      if (r == kFailingRank) throw std::runtime_error("rank 2 broke");
      try {
        // Each remaining rank blocks in a different call that the failed rank never joins.
        std::vector<float> data(kMessageFloats);
        if (r == 0) comm.irecv(data.data(), kMessageFloats * sizeof(float), kFailingRank)->wait();
        if (r == 1) comm.barrier();
        if (r == 3) {
          std::vector<float> gathered(kSize * kMessageFloats);
          comm.all_gather(data.data(), gathered.data(), kMessageFloats * sizeof(float));
        }
      } catch (const AbortedError& error) {
        EXPECT_NE(std::string(error.what()).find("rank 2 failed"), std::string::npos);
        aborted.fetch_add(1);
        throw;
      }
    });
    FAIL() << "expected the failing rank's exception";
  } catch (const Error& error) {
    FAIL() << "got an abort instead of the real error: " << error.what();
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "rank 2 broke");
  }
  EXPECT_EQ(aborted.load(), kSize - 1);
}

TEST(InProcessComm, RankReturningWithoutMatchingSendFailsTheWaiter) {
  EXPECT_THROW(
      run_in_process(2,
                     [](Communicator& comm) {
                       std::vector<float> data(kMessageFloats);
                       if (comm.rank() == 1) {
                         comm.irecv(data.data(), kMessageFloats * sizeof(float), 0)->wait();
                       }
                     }),
      Error);
}

TEST(InProcessComm, TransferProgressesWhileSenderIsBusy) {
  // The sender does not call wait() until the receiver has its data: only a progress thread
  // independent of the rank threads can complete the transfer.
  constexpr auto kTimeout = std::chrono::seconds(10);
  std::promise<void> received;
  std::future<void> received_future = received.get_future();
  std::vector<float> recv(kMessageFloats, std::nanf(""));
  bool completed_in_time = false;
  run_in_process(2, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      std::vector<float> send(kMessageFloats);
      std::iota(send.begin(), send.end(), 1.0f);
      auto request = comm.isend(send.data(), send.size() * sizeof(float), 1);
      completed_in_time = received_future.wait_for(kTimeout) == std::future_status::ready;
      request->wait();
    } else {
      comm.irecv(recv.data(), recv.size() * sizeof(float), 0)->wait();
      received.set_value();
    }
  });
  EXPECT_TRUE(completed_in_time);
  for (size_t i = 0; i < kMessageFloats; ++i) EXPECT_EQ(recv[i], float(i + 1));
}

TEST(InProcessComm, InvalidPeerAndSizeAreRejected) {
  EXPECT_THROW(run_in_process(0, [](Communicator&) {}), Error);
  EXPECT_THROW(run_in_process(2,
                              [](Communicator& comm) {
                                float value = 0.0f;
                                comm.isend(&value, sizeof(value), comm.size());
                              }),
               Error);
}

}  // namespace
}  // namespace ringpack
