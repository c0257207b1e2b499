// run_rank: the backend buffers of one rank and its calls into the CP schedule.
#include "job/rank_runner.h"

#include <memory>

#include "comm/staging_communicator.h"

namespace ringpack {
namespace {

// A buffer in the backend's memory space, freed with it.
class BackendBuffer {
 public:
  BackendBuffer(AttentionBackend& backend, size_t bytes)
      : backend_(backend), data_(bytes ? backend.allocate(bytes) : nullptr), bytes_(bytes) {}
  BackendBuffer(AttentionBackend& backend, const HostTensor& host)
      : BackendBuffer(backend, host.size_bytes()) {
    if (bytes_) backend_.copy_from_host(data_, host.data(), bytes_);
  }
  ~BackendBuffer() {
    if (data_) backend_.deallocate(data_);
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  void* get() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void download(HostTensor& host) const {
    if (bytes_) backend_.copy_to_host(host.data(), data_, bytes_);
  }

 private:
  AttentionBackend& backend_;
  void* data_;
  size_t bytes_;
};

}  // namespace

RankResult run_rank(const RankShard& shard, const RunOptions& options, const BatchOptions& batch,
                    Communicator& host_comm) {
  std::unique_ptr<AttentionBackend> backend =
      make_backend(options.backend, options.backend_options);
  // Device buffers travel between the in-process ranks through host staging.
  StagingCommunicator staging(host_comm, *backend);
  Communicator& comm = backend->memory_space() == MemorySpace::kDevice
                           ? static_cast<Communicator&>(staging)
                           : host_comm;
  const int n = shard.q.tokens;

  BackendBuffer q(*backend, shard.q), k(*backend, shard.k), v(*backend, shard.v);
  BackendBuffer segment_ids(*backend, shard.segment_ids), positions(*backend, shard.positions);

  ShardInputs in;
  in.dims = {batch.batch, n, n, batch.num_heads_q, batch.num_heads_kv, batch.head_dim};
  in.dtype = batch.dtype;
  in.mask = batch.mask;
  in.q = q.get();
  in.k = k.get();
  in.v = v.get();
  in.segment_ids = segment_ids.as<int32_t>();
  in.positions = positions.as<int32_t>();
  in.step_visible = shard.step_visible;

  RankResult result;
  result.out = HostTensor(shard.q.rows, n, shard.q.token_bytes);
  result.lse = HostTensor(batch.batch * batch.num_heads_q, n, sizeof(float));
  BackendBuffer out(*backend, result.out.size_bytes());
  BackendBuffer lse(*backend, result.lse.size_bytes());

  ScheduleStats forward_stats;
  cp_forward(batch.strategy, in, *backend, comm, {out.get(), lse.as<float>()}, forward_stats);
  out.download(result.out);
  lse.download(result.lse);

  RankReport& report = result.report;
  report.rank = comm.rank();
  report.steps_computed = forward_stats.steps_computed;
  report.steps_skipped = forward_stats.steps_skipped;
  report.bytes_sent = forward_stats.bytes_sent;
  report.forward_seconds = forward_stats.total_seconds;
  report.compute_seconds = forward_stats.compute_seconds;
  report.wait_seconds = forward_stats.wait_seconds;
  if (!options.backward) return result;

  BackendBuffer dout(*backend, shard.dout);
  result.dq = HostTensor(shard.q.rows, n, shard.q.token_bytes);
  result.dk = HostTensor(shard.k.rows, n, shard.k.token_bytes);
  result.dv = HostTensor(shard.v.rows, n, shard.v.token_bytes);
  BackendBuffer dq(*backend, result.dq.size_bytes());
  BackendBuffer dk(*backend, result.dk.size_bytes());
  BackendBuffer dv(*backend, result.dv.size_bytes());
  ScheduleStats backward_stats;
  cp_backward(batch.strategy, in, out.get(), lse.as<float>(), dout.get(), *backend, comm,
              {dq.get(), dk.get(), dv.get()}, backward_stats);
  dq.download(result.dq);
  dk.download(result.dk);
  dv.download(result.dv);

  report.steps_computed += backward_stats.steps_computed;
  report.steps_skipped += backward_stats.steps_skipped;
  report.bytes_sent += backward_stats.bytes_sent;
  report.backward_seconds = backward_stats.total_seconds;
  report.compute_seconds += backward_stats.compute_seconds;
  report.wait_seconds += backward_stats.wait_seconds;
  return result;
}

}  // namespace ringpack
