// A Communicator for backends whose buffers live in device memory, over a host communicator:
// every payload is copied to a host staging buffer (through the backend), moved by the host
// communicator, and copied back. It lets the unchanged CP schedules run as several virtual ranks
// on one GPU with the in-process communicator; a device communicator (NCCL) replaces it on real
// multi-GPU runs. Correct, not fast: each transfer crosses PCIe twice.
#pragma once

#include "ringpack/attention.h"
#include "ringpack/comm.h"

namespace ringpack {

class StagingCommunicator final : public Communicator {
 public:
  StagingCommunicator(Communicator& host, AttentionBackend& backend)
      : host_(host), backend_(backend) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) override;
  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) override;
  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter_sum(const float* send, float* recv, size_t count) override;
  void barrier() override { host_.barrier(); }
  uint64_t bytes_sent() const override { return host_.bytes_sent(); }

 private:
  Communicator& host_;
  AttentionBackend& backend_;
};

}  // namespace ringpack
