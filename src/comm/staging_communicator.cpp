// StagingCommunicator: device payloads staged through host buffers (see the header).
#include "comm/staging_communicator.h"

#include <cstddef>
#include <vector>

namespace ringpack {
namespace {

// A send whose host copy must outlive the transfer.
class StagedSend final : public CommRequest {
 public:
  StagedSend(std::vector<std::byte> staging, std::unique_ptr<CommRequest> request)
      : staging_(std::move(staging)), request_(std::move(request)) {}
  ~StagedSend() override { request_.reset(); }  // releases the transfer before the buffer
  void wait() override { request_->wait(); }

 private:
  std::vector<std::byte> staging_;
  std::unique_ptr<CommRequest> request_;
};

// A receive that lands in a host buffer and is copied to the device buffer on wait().
class StagedRecv final : public CommRequest {
 public:
  StagedRecv(AttentionBackend& backend, void* destination, size_t bytes, int peer,
             Communicator& host)
      : backend_(backend), destination_(destination), staging_(bytes) {
    request_ = host.irecv(staging_.data(), bytes, peer);
  }
  ~StagedRecv() override { request_.reset(); }
  void wait() override {
    request_->wait();
    if (!delivered_ && !staging_.empty()) {
      backend_.copy_from_host(destination_, staging_.data(), staging_.size());
    }
    delivered_ = true;
  }

 private:
  AttentionBackend& backend_;
  void* destination_;
  std::vector<std::byte> staging_;
  std::unique_ptr<CommRequest> request_;
  bool delivered_ = false;
};

std::vector<std::byte> to_host(AttentionBackend& backend, const void* data, size_t bytes) {
  std::vector<std::byte> host(bytes);
  if (bytes > 0) backend.copy_to_host(host.data(), data, bytes);
  return host;
}

}  // namespace

std::unique_ptr<CommRequest> StagingCommunicator::isend(const void* data, size_t bytes, int peer) {
  std::vector<std::byte> staging = to_host(backend_, data, bytes);
  auto request = host_.isend(staging.data(), bytes, peer);  // vector moves keep the buffer
  return std::make_unique<StagedSend>(std::move(staging), std::move(request));
}

std::unique_ptr<CommRequest> StagingCommunicator::irecv(void* data, size_t bytes, int peer) {
  return std::make_unique<StagedRecv>(backend_, data, bytes, peer, host_);
}

void StagingCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  const std::vector<std::byte> mine = to_host(backend_, send, bytes);
  std::vector<std::byte> gathered(bytes * size_t(size()));
  host_.all_gather(mine.data(), gathered.data(), bytes);
  if (!gathered.empty()) backend_.copy_from_host(recv, gathered.data(), gathered.size());
}

void StagingCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t count) {
  const std::vector<std::byte> all =
      to_host(backend_, send, count * size_t(size()) * sizeof(float));
  std::vector<float> mine(count);
  host_.reduce_scatter_sum(reinterpret_cast<const float*>(all.data()), mine.data(), count);
  if (count > 0) backend_.copy_from_host(recv, mine.data(), count * sizeof(float));
}

}  // namespace ringpack
