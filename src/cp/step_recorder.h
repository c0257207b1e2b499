// StepRecorder: the schedules' view of time and of the host's one wait (docs/design.md §4).
//
// A schedule marks compute and wait spans on the backend's compute stream and collects the
// transfer spans of its communicator on the same Timeline; finish() is the one host wait of a
// schedule call: it waits, with the communicator's deadline, until the compute stream (which
// has waited on every transfer) is idle, then turns the marks into ScheduleStats.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/cp.h"
#include "ringpack/timeline.h"

namespace ringpack {

class StepRecorder {
 public:
  StepRecorder(AttentionBackend& backend, Communicator& comm);
  ~StepRecorder();  // detaches the timeline from the communicator
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // A time point after the work enqueued so far on the compute stream.
  size_t mark();
  // A compute-stream span between two marks.
  void compute(const char* name, int step, size_t begin, size_t end);
  // Waits on `request` (the compute stream now follows the transfer) and records the wait and,
  // when its communicator marks transfers, the transfer as `transfer_name` (its marks exist once
  // the peer posted its side, which the wait guarantees).
  void wait(CommRequest& request, int step, const char* transfer_name);
  // Runs a collective (which orders the compute stream behind its result) as a wait span.
  template <class Collective>
  void collective(Collective&& run) {
    const size_t begin = mark();
    run();
    spans_.push_back({TraceSpan::Lane::kCompute, "wait", 0, begin, mark()});
  }

  // The host's one wait: returns when the compute stream is idle; throws (after aborting the
  // communicator) when the communicator reports a failure or the deadline passes. Then fills
  // stats: spans, compute and wait seconds, total seconds.
  void finish(ScheduleStats& stats);

 private:
  struct Span {
    TraceSpan::Lane lane;
    const char* name;
    int step;
    size_t begin;
    size_t end;
  };

  AttentionBackend& backend_;
  Communicator& comm_;
  std::unique_ptr<Timeline> timeline_;
  size_t start_ = 0;
  std::vector<Span> spans_;
};

// An NVTX range (shown by Nsight Systems) around the host's enqueueing of one step, named
// "<what> <step>"; nothing when ringpack is built without CUDA.
class NvtxRange {
 public:
  NvtxRange(const char* what, int step);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// Waits until backend.idle(), polling comm.check_failures(); on a failure or after
// comm.timeout_seconds() aborts the communicator and throws Error naming the rank and `what`.
void wait_idle(AttentionBackend& backend, Communicator& comm, const char* what);

}  // namespace ringpack
