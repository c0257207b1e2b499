// The TCP rendezvous (src/comm/rendezvous.h) with ranks as threads on 127.0.0.1: broadcast,
// gather and agreement at 1, 2 and 4 ranks, and every failure it must name: a world size that
// differs, a rank that never comes (1 s deadline), no rank 0, a rank claimed twice, a rank that
// leaves, a stray connection (ignored), values that differ between ranks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/rendezvous.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

using Clock = std::chrono::steady_clock;

// A TCP port that was free a moment ago (bound to port 0, read back, closed).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

RendezvousConfig config_for(int port, int rank, int world_size, double timeout_seconds = 20.0) {
  RendezvousConfig config;
  config.address = "127.0.0.1";
  config.port = port;
  config.rank = rank;
  config.world_size = world_size;
  config.timeout_seconds = timeout_seconds;
  return config;
}

// Runs fn(rank) for each rank in `ranks` on its own thread; returns each one's Error message
// ("" when it returned normally).
std::vector<std::string> run_ranks(const std::vector<int>& ranks,
                                   const std::function<void(int)>& fn) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(ranks[i]);
      } catch (const Error& error) {
        errors[i] = error.what();
      } catch (const std::exception& error) {
        errors[i] = std::string("unexpected exception: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return errors;
}

std::vector<int> all_ranks(int world_size) {
  std::vector<int> ranks;
  for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  return ranks;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

constexpr size_t kIdBytes = 128;  // an NCCL unique id

TEST(Rendezvous, BroadcastGatherAndAgreeAtOneTwoAndFourRanks) {
  for (const int world : {1, 2, 4}) {
    const int port = free_port();
    std::vector<std::vector<uint8_t>> received(static_cast<size_t>(world));
    std::vector<std::string> gathered;
    const auto errors = run_ranks(all_ranks(world), [&](int rank) {
      Rendezvous rendezvous(config_for(port, rank, world));
      EXPECT_EQ(rendezvous.rank(), rank);
      EXPECT_EQ(rendezvous.size(), world);
      std::vector<uint8_t> blob(kIdBytes, 0);
      if (rank == 0) {
        for (size_t i = 0; i < kIdBytes; ++i) blob[i] = uint8_t(i * 7 + 3);
      }
      rendezvous.broadcast(blob.data(), blob.size());
      received[size_t(rank)] = blob;

      const std::vector<std::string> values = rendezvous.gather("rank " + std::to_string(rank));
      if (rank == 0) {
        gathered = values;
      } else {
        EXPECT_TRUE(values.empty());
      }
      rendezvous.settle({});
      rendezvous.check_agree(0x1234'5678'9abc'def0ULL, "the batch");
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(errors[size_t(r)], "") << "world " << world << " rank " << r;
      ASSERT_EQ(received[size_t(r)].size(), kIdBytes);
      for (size_t i = 0; i < kIdBytes; ++i) {
        ASSERT_EQ(received[size_t(r)][i], uint8_t(i * 7 + 3)) << "world " << world << " rank " << r;
      }
    }
    ASSERT_EQ(gathered.size(), size_t(world));
    for (int r = 0; r < world; ++r) EXPECT_EQ(gathered[size_t(r)], "rank " + std::to_string(r));
  }
}

TEST(Rendezvous, WorldSizeMismatchStopsEveryRank) {
  const int port = free_port();
  const auto errors = run_ranks(
      {0, 1}, [&](int rank) { Rendezvous rendezvous(config_for(port, rank, rank == 0 ? 2 : 3)); });
  for (const std::string& error : errors) {
    EXPECT_TRUE(contains(error, "rank 1 (from 127.0.0.1:")) << error;
    EXPECT_TRUE(contains(error, "was started with a world size of 3, rank 0 with 2")) << error;
  }
}

TEST(Rendezvous, MissingRankTimesOutNamingIt) {
  const int port = free_port();
  const auto start = Clock::now();
  const auto errors = run_ranks({0, 1}, [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 3, /*timeout_seconds=*/1.0));
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  for (const std::string& error : errors) {
    EXPECT_TRUE(contains(error, "rank 0: rank 2 did not reach the rendezvous at 127.0.0.1:" +
                                    std::to_string(port) + " within 1 s"))
        << error;
  }
}

TEST(Rendezvous, NoRankZeroTimesOutNamingTheAddress) {
  const int port = free_port();
  const auto start = Clock::now();
  const auto errors = run_ranks({2}, [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 3, /*timeout_seconds=*/0.5));
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 3.0);
  EXPECT_TRUE(contains(errors[0], "rank 2: could not reach the rendezvous at 127.0.0.1:" +
                                      std::to_string(port) + " within 0.5 s"))
      << errors[0];
  EXPECT_TRUE(contains(errors[0], "refused")) << errors[0];
  EXPECT_TRUE(contains(errors[0], "MASTER_ADDR/MASTER_PORT")) << errors[0];
}

TEST(Rendezvous, RankClaimedTwiceIsAnError) {
  const int port = free_port();
  const auto errors = run_ranks({0, 1, 1}, [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 3, /*timeout_seconds=*/10.0));
  });
  for (const std::string& error : errors) {
    EXPECT_TRUE(contains(error, "rank 0: rank 1 connected twice")) << error;
  }
}

TEST(Rendezvous, RankThatLeavesIsNamed) {
  const int port = free_port();
  const auto errors = run_ranks({0, 1, 2}, [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 3, /*timeout_seconds=*/10.0));
    if (rank == 1) return;  // leaves: its connection closes
    rendezvous.gather("value");
    rendezvous.settle({});
  });
  EXPECT_EQ(errors[1], "");
  for (const size_t r : {size_t(0), size_t(2)}) {
    EXPECT_TRUE(contains(errors[r], "rank 0: waiting for rank 1")) << errors[r];
    EXPECT_TRUE(contains(errors[r], "did rank 1 fail?")) << errors[r];
  }
}

TEST(Rendezvous, StrayConnectionIsIgnored) {
  const int port = free_port();
  std::string root_error;
  std::thread root([&] {
    try {
      Rendezvous rendezvous(config_for(port, 0, 2, /*timeout_seconds=*/10.0));
      uint8_t byte = 42;
      rendezvous.broadcast(&byte, 1);
    } catch (const Error& error) {
      root_error = error.what();
    }
  });
  // Something that is not a rank: connects (once rank 0 listens), sends garbage, hangs up.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(uint16_t(port));
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 &&
         Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const char garbage[] = "GET / HTTP/1.0\r\n\r\n";
  EXPECT_GT(::send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL), 0);
  ::close(fd);

  uint8_t byte = 0;
  const auto errors = run_ranks({1}, [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 2, /*timeout_seconds=*/10.0));
    rendezvous.broadcast(&byte, 1);
  });
  root.join();
  EXPECT_EQ(root_error, "");
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(byte, 42);
}

TEST(Rendezvous, DisagreementStopsEveryRankNamingTheFirstOddRank) {
  const int port = free_port();
  const auto errors = run_ranks(all_ranks(4), [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 4));
    rendezvous.check_agree(rank == 2 || rank == 3 ? 0xbad : 0x600d, "the batch");
  });
  for (const std::string& error : errors) {
    EXPECT_TRUE(contains(error,
                         "ranks disagree on the batch: rank 0 has 0x000000000000600d, "
                         "rank 2 has 0x0000000000000bad"))
        << error;
  }
}

TEST(Rendezvous, VerdictOfRankZeroReachesEveryRank) {
  const int port = free_port();
  const auto errors = run_ranks(all_ranks(3), [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 3));
    rendezvous.gather("x");
    rendezvous.settle(rank == 0 ? "rank 0: the layouts differ" : "ignored");
  });
  for (const std::string& error : errors) EXPECT_EQ(error, "rank 0: the layouts differ");
}

TEST(Rendezvous, UnusableAfterAFailure) {
  const int port = free_port();
  run_ranks(all_ranks(2), [&](int rank) {
    Rendezvous rendezvous(config_for(port, rank, 2));
    EXPECT_THROW(rendezvous.settle(rank == 0 ? "stop" : ""), Error);
    uint8_t byte = 0;
    try {
      rendezvous.broadcast(&byte, 1);
      ADD_FAILURE() << "rank " << rank << ": a failed rendezvous must refuse further calls";
    } catch (const Error& error) {
      EXPECT_TRUE(contains(error.what(), "failed before")) << error.what();
    }
  });
}

}  // namespace
}  // namespace ringpack
