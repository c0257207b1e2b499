// Time points in stream order, for the step-loop statistics and trace (docs/design.md §4).
//
// A backend's compute stream and a communicator's transfer stream run asynchronously to the host
// on a GPU, so host clocks cannot time them. A Timeline records time points in stream order and
// reads them once the work before them finished. On the host (stream == nullptr of a host
// backend) a mark is simply the host clock at the call.
#pragma once

#include <cstddef>

namespace ringpack {

class Timeline {
 public:
  virtual ~Timeline() = default;

  // Records a time point after the work enqueued so far on `stream` (the backend's or the
  // communicator's stream() handle; nullptr for host work) and returns its id. Thread-safe: a
  // communicator may mark from its progress thread.
  virtual size_t mark(void* stream) = 0;

  // Seconds from the timeline's creation to mark `id`. Only valid once the stream of that mark
  // has reached it (after the schedule's final wait).
  virtual double seconds(size_t id) = 0;
};

}  // namespace ringpack
