// `--trace FILE`: the step loops of a run as Chrome trace-event JSON (opens in Perfetto or
// chrome://tracing). One process per rank; thread "compute" holds compute and wait spans on the
// compute stream, thread "transfer" the transfers on the communicator's stream (where it records
// them: device, nccl). The backward follows the forward on one time axis.
#pragma once

#include <string>

#include "ringpack/job.h"

namespace ringpack::cli {

std::string trace_json(const RunReport& report);

}  // namespace ringpack::cli
