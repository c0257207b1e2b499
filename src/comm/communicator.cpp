// What every Communicator shares (include/ringpack/comm.h): the names of the kinds and the
// default exchange.
#include <memory>
#include <utility>

#include "core/excerpt.h"
#include "ringpack/comm.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// Both halves of an exchange as one request.
class PairRequest final : public CommRequest {
 public:
  PairRequest(std::unique_ptr<CommRequest> send, std::unique_ptr<CommRequest> recv)
      : send_(std::move(send)), recv_(std::move(recv)) {}
  void wait() override {
    send_->wait();
    recv_->wait();
  }

 private:
  std::unique_ptr<CommRequest> send_;
  std::unique_ptr<CommRequest> recv_;
};

}  // namespace

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::kThreads:
      return "threads";
    case CommKind::kDevice:
      return "device";
    case CommKind::kMpi:
      return "mpi";
    case CommKind::kNccl:
      return "nccl";
  }
  return "?";
}

CommKind parse_comm_kind(std::string_view name) {
  for (const CommKind kind :
       {CommKind::kThreads, CommKind::kDevice, CommKind::kMpi, CommKind::kNccl}) {
    if (name == comm_kind_name(kind)) return kind;
  }
  RINGPACK_FAIL("unknown communicator '", excerpt(name), "': use threads, device, mpi or nccl");
}

std::unique_ptr<CommRequest> Communicator::exchange(const void* send, int dst, void* recv, int src,
                                                    size_t bytes) {
  // Receive first: a host communicator can then land the data as soon as the peer sends.
  std::unique_ptr<CommRequest> recv_request = irecv(recv, bytes, src);
  std::unique_ptr<CommRequest> send_request = isend(send, bytes, dst);
  return std::make_unique<PairRequest>(std::move(send_request), std::move(recv_request));
}

}  // namespace ringpack
