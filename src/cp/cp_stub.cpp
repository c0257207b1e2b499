// STUB: delete when the schedules land.
#include "ringpack/cp.h"
#include "ringpack/error.h"
namespace ringpack {
const char* strategy_name(Strategy) { return "?"; }
Strategy parse_strategy(std::string_view) { RINGPACK_FAIL("not implemented"); }
void cp_forward(Strategy, const ShardInputs&, AttentionBackend&, Communicator&, const ForwardOutputs&, ScheduleStats&) { RINGPACK_FAIL("not implemented"); }
void cp_backward(Strategy, const ShardInputs&, const void*, const float*, const void*, AttentionBackend&, Communicator&, const BackwardOutputs&, ScheduleStats&) { RINGPACK_FAIL("not implemented"); }
}
