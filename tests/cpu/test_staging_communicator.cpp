// StagingCommunicator over the in-process communicator, with a host backend doing the staging
// copies (the same calls a CUDA backend answers with device copies).
#include <gtest/gtest.h>

#include <numeric>

#include "comm/staging_communicator.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"

namespace ringpack {
namespace {

TEST(StagingCommunicator, RingExchangeAndCollectivesMoveTheRightValues) {
  for (int size : {1, 2, 3, 4}) {
    run_in_process(size, [&](Communicator& host) {
      auto backend = make_backend(BackendKind::kReference, {});
      StagingCommunicator comm(host, *backend);
      const int r = comm.rank();
      const int next = (r + 1) % size, prev = (r + size - 1) % size;

      std::vector<int> mine(5), theirs(5, -1);
      std::iota(mine.begin(), mine.end(), 100 * r);
      auto recv = comm.irecv(theirs.data(), sizeof(int) * theirs.size(), prev);
      auto send = comm.isend(mine.data(), sizeof(int) * mine.size(), next);
      mine.assign(mine.size(), -7);  // the send was staged: the source may change now
      send->wait();
      recv->wait();
      for (int i = 0; i < 5; ++i) EXPECT_EQ(theirs[i], 100 * prev + i);

      const float value = float(r + 1);
      std::vector<float> gathered(size, 0.0f);
      comm.all_gather(&value, gathered.data(), sizeof(float));
      for (int i = 0; i < size; ++i) EXPECT_EQ(gathered[i], float(i + 1));

      std::vector<float> contributions(2 * size, float(r));  // [size][2]
      std::vector<float> sum(2, -1.0f);
      comm.reduce_scatter_sum(contributions.data(), sum.data(), 2);
      const float expected = float(size * (size - 1) / 2);
      EXPECT_EQ(sum[0], expected);
      EXPECT_EQ(sum[1], expected);
      comm.barrier();
      EXPECT_EQ(comm.bytes_sent(), host.bytes_sent());
    });
  }
}

}  // namespace
}  // namespace ringpack
