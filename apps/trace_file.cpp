// Chrome trace-event JSON of a run's step loops (trace_file.h).
#include "trace_file.h"

#include <nlohmann/json.hpp>

namespace ringpack::cli {
namespace {

using nlohmann::json;

constexpr double kMicrosPerSecond = 1e6;
constexpr int kComputeThread = 0;
constexpr int kTransferThread = 1;
constexpr double kPassGapSeconds = 1e-4;  // between the forward's end and the backward's start

void add_spans(json& events, int rank, const char* pass, const std::vector<TraceSpan>& spans,
               double offset_seconds) {
  for (const TraceSpan& span : spans) {
    const bool transfer = span.lane == TraceSpan::Lane::kTransfer;
    events.push_back({{"name", span.name + " " + std::to_string(span.step)},
                      {"cat", std::string(pass) + (transfer ? ",transfer" : ",compute")},
                      {"ph", "X"},
                      {"pid", rank},
                      {"tid", transfer ? kTransferThread : kComputeThread},
                      {"ts", (offset_seconds + span.start_seconds) * kMicrosPerSecond},
                      {"dur", (span.end_seconds - span.start_seconds) * kMicrosPerSecond},
                      {"args", {{"pass", pass}, {"step", span.step}}}});
  }
}

json metadata(const char* what, int rank, int thread, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", rank}, {"tid", thread}, {"args", {{"name", name}}}};
}

}  // namespace

std::string trace_json(const RunReport& report) {
  json events = json::array();
  for (const RankReport& rank : report.ranks) {
    events.push_back(metadata("process_name", rank.rank, 0, "rank " + std::to_string(rank.rank)));
    events.push_back(metadata("thread_name", rank.rank, kComputeThread, "compute stream"));
    events.push_back(metadata("thread_name", rank.rank, kTransferThread, "transfer stream"));
    add_spans(events, rank.rank, "forward", rank.forward_spans, 0.0);
    add_spans(events, rank.rank, "backward", rank.backward_spans,
              rank.forward_seconds + kPassGapSeconds);
  }
  const json trace = {{"traceEvents", events},
                      {"displayTimeUnit", "ms"},
                      {"otherData",
                       {{"backend", report.backend},
                        {"comm", report.comm},
                        {"strategy", strategy_name(report.options.strategy)},
                        {"reorder", report.reorder},
                        {"cp", report.options.cp}}}};
  return trace.dump(1) + "\n";
}

}  // namespace ringpack::cli
