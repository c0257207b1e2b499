// StepRecorder and wait_idle (step_recorder.h).
#include "cp/step_recorder.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "ringpack/error.h"

#if defined(RINGPACK_WITH_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define RINGPACK_HAS_NVTX 1
#endif

namespace ringpack {

StepRecorder::StepRecorder(AttentionBackend& backend, Communicator& comm)
    : backend_(backend), comm_(comm), timeline_(backend.make_timeline()) {
  start_ = timeline_->mark(backend_.stream());
  comm_.set_timeline(timeline_.get());
}

StepRecorder::~StepRecorder() {
  comm_.set_timeline(nullptr);
}

size_t StepRecorder::mark() {
  return timeline_->mark(backend_.stream());
}

void StepRecorder::compute(const char* name, int step, size_t begin, size_t end) {
  spans_.push_back({TraceSpan::Lane::kCompute, name, step, begin, end});
}

void StepRecorder::wait(CommRequest& request, int step, const char* transfer_name) {
  const size_t begin = mark();
  request.wait();
  spans_.push_back({TraceSpan::Lane::kCompute, "wait", step, begin, mark()});
  if (const auto marks = request.marks()) {
    spans_.push_back(
        {TraceSpan::Lane::kTransfer, transfer_name, step, marks->first, marks->second});
  }
}

void StepRecorder::finish(ScheduleStats& stats) {
  const size_t end = mark();
  wait_idle(backend_, comm_, "the step loop");
  const double origin = timeline_->seconds(start_);
  stats.total_seconds = timeline_->seconds(end) - origin;
  stats.compute_seconds = 0.0;
  stats.wait_seconds = 0.0;
  stats.spans.clear();
  for (const Span& span : spans_) {
    TraceSpan out;
    out.lane = span.lane;
    out.name = span.name;
    out.step = span.step;
    out.start_seconds = timeline_->seconds(span.begin) - origin;
    out.end_seconds = timeline_->seconds(span.end) - origin;
    const double length = out.end_seconds - out.start_seconds;
    if (span.lane == TraceSpan::Lane::kCompute) {
      (out.name == "wait" ? stats.wait_seconds : stats.compute_seconds) += length;
    }
    stats.spans.push_back(std::move(out));
  }
}

NvtxRange::NvtxRange(const char* what, int step) {
#ifdef RINGPACK_HAS_NVTX
  nvtxRangePushA((std::string(what) + " " + std::to_string(step)).c_str());
#else
  (void)what;
  (void)step;
#endif
}

NvtxRange::~NvtxRange() {
#ifdef RINGPACK_HAS_NVTX
  nvtxRangePop();
#endif
}

void wait_idle(AttentionBackend& backend, Communicator& comm, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(comm.timeout_seconds());
  // Short pauses: the end of a step loop is on the critical path of every training step.
  constexpr auto kMaxPause = std::chrono::microseconds(50);
  auto pause = std::chrono::microseconds(5);
  try {
    while (!backend.idle()) {
      comm.check_failures();
      RINGPACK_CHECK(Clock::now() < deadline, "rank ", comm.rank(), ": ", what,
                     " did not finish within ", comm.timeout_seconds(),
                     " s (--comm-timeout): a peer rank may have died or hung");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, kMaxPause);
    }
    comm.check_failures();
  } catch (...) {
    comm.abort();  // nothing may keep waiting on transfers that will never finish
    throw;
  }
}

}  // namespace ringpack
