// Text reports (text_report.h): aligned tables, one per section.
#include "text_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <vector>

namespace ringpack::cli {
namespace {

constexpr double kMillisecondsPerSecond = 1000.0;
constexpr double kPercent = 100.0;
constexpr double kBytesPerKiB = 1024.0;
constexpr const char* kIndent = "  ";

// printf-style formatting into a std::string.
template <class... Args>
std::string format(const char* pattern, Args... args) {
  constexpr size_t kFirstTry = 128;
  std::vector<char> buffer(kFirstTry);
  int size = std::snprintf(buffer.data(), buffer.size(), pattern, args...);
  if (size >= int(buffer.size())) {
    buffer.resize(size_t(size) + 1);
    size = std::snprintf(buffer.data(), buffer.size(), pattern, args...);
  }
  return std::string(buffer.data(), size_t(std::max(size, 0)));
}

std::string milliseconds(double seconds) {
  return format("%.3f", seconds * kMillisecondsPerSecond);
}

// 1536 -> "1.5 KiB".
std::string bytes(uint64_t count) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(count);
  size_t unit = 0;
  while (value >= kBytesPerKiB && unit + 1 < std::size(kUnits)) {
    value /= kBytesPerKiB;
    ++unit;
  }
  return unit == 0 ? format("%llu B", static_cast<unsigned long long>(count))
                   : format("%.1f %s", value, kUnits[unit]);
}

// A table with a header row; the first column is left-aligned, the others right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  std::string str() const {
    std::vector<size_t> widths;
    for (const auto& row : rows_) {
      widths.resize(std::max(widths.size(), row.size()), 0);
      for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    }
    std::ostringstream out;
    for (const auto& row : rows_) {
      out << kIndent;
      for (size_t c = 0; c < row.size(); ++c) {
        const std::string pad(widths[c] - row[c].size(), ' ');
        out << (c == 0 ? row[c] + pad : "  " + pad + row[c]);
      }
      out << "\n";
    }
    return out.str();
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string mask_text(const MaskSpec& mask) {
  std::string text = mask.causal ? "causal" : "non-causal";
  if (mask.window >= 0) text += format(", window %lld", static_cast<long long>(mask.window));
  return text;
}

std::string setup_line(const char* command, const BatchOptions& options) {
  return format("ringpack %s: cp %d, %s, %s, heads %d/%d, head_dim %d, %s\n", command, options.cp,
                strategy_name(options.strategy), dtype_name(options.dtype), options.num_heads_q,
                options.num_heads_kv, options.head_dim, mask_text(options.mask).c_str());
}

// Three aligned lines (tokens, segment ids, positions) of one row, cut after kLayoutTokensShown
// tokens with a note.
std::string layout_rows(const RankLayout& rank, size_t row) {
  const std::vector<int32_t>* fields[] = {&rank.tokens[row], &rank.segment_ids[row],
                                          &rank.positions[row]};
  const char* const labels[] = {"tokens", "segment ids", "positions"};
  const size_t count = fields[0]->size();
  const size_t shown = std::min(count, kLayoutTokensShown);
  std::vector<size_t> widths(shown, 0);
  for (const auto* field : fields) {
    for (size_t i = 0; i < shown; ++i) {
      widths[i] = std::max(widths[i], std::to_string(field->at(i)).size());
    }
  }
  std::ostringstream out;
  for (size_t f = 0; f < std::size(fields); ++f) {
    out << kIndent << kIndent << format("%-12s", labels[f]);
    for (size_t i = 0; i < shown; ++i) {
      out << format(" %*d", int(widths[i]), fields[f]->at(i));
    }
    if (shown < count) out << format(" ... (%zu more)", count - shown);
    out << "\n";
  }
  return out.str();
}

double exposed_percent(const RankReport& rank) {
  const double loop = rank.forward_seconds + rank.backward_seconds;
  return loop > 0.0 ? kPercent * rank.wait_seconds / loop : 0.0;
}

}  // namespace

std::string format_run_report(const RunReport& report) {
  const BatchOptions& options = report.options;
  std::ostringstream out;
  out << setup_line("run", options);
  out << format("backend: %s, communicator: %s\n", report.backend.c_str(), report.comm.c_str());
  out << format("batch: %d row(s) x %d tokens, %d documents, %lld padding tokens\n", options.batch,
                options.seq_len, report.documents, static_cast<long long>(report.padding_tokens));
  out << "reorder: " << report.reorder;
  if (!report.reorder_reason.empty()) out << " (" << report.reorder_reason << ")";
  out << "\n\n";

  const int64_t total_pairs =
      std::accumulate(report.ranks.begin(), report.ranks.end(), int64_t{0},
                      [](int64_t sum, const RankReport& rank) { return sum + rank.visible_pairs; });
  // exposed: the share of the step loops the compute stream spent waiting for transfers.
  Table ranks({"rank", "visible pairs", "share", "steps computed", "steps skipped", "bytes sent",
               "fwd ms", "bwd ms", "compute ms", "transfer ms", "wait ms", "exposed"});
  for (const RankReport& rank : report.ranks) {
    const double share =
        total_pairs > 0 ? kPercent * double(rank.visible_pairs) / double(total_pairs) : 0.0;
    ranks.add({std::to_string(rank.rank), std::to_string(rank.visible_pairs),
               format("%.1f%%", share), std::to_string(rank.steps_computed),
               std::to_string(rank.steps_skipped), bytes(rank.bytes_sent),
               milliseconds(rank.forward_seconds), milliseconds(rank.backward_seconds),
               milliseconds(rank.compute_seconds), milliseconds(rank.transfer_seconds),
               milliseconds(rank.wait_seconds), format("%.1f%%", exposed_percent(rank))});
  }
  out << "ranks:\n" << ranks.str();
  out << format("imbalance (max / mean visible pairs): %.3f\n\n", report.imbalance);

  Table phases({"phase", "ms"});
  for (const PhaseTime& phase : report.phases)
    phases.add({phase.name, milliseconds(phase.seconds)});
  out << "phases:\n" << phases.str() << "\n";

  if (report.verified) {
    Table errors({"tensor", "max_abs_err", "rel_err", "tolerance", "pass"});
    for (const TensorError& error : report.errors) {
      errors.add({error.name, format("%.3e", error.max_abs_err), format("%.3e", error.rel_err),
                  format("%.3e", error.tolerance), error.passed ? "yes" : "NO"});
    }
    out << "errors against the fp64 reference:\n" << errors.str();
    for (const TensorError& error : report.errors) {
      if (!error.passed && !error.worst.empty()) {
        out << kIndent << error.name << " worst: " << error.worst << "\n";
      }
    }
  } else {
    out << "verification skipped"
        << (report.verify_note.empty() ? std::string(" (--no-verify)") : ": " + report.verify_note)
        << "\n";
  }
  out << (!report.verified ? "NOT VERIFIED" : report.passed ? "PASS" : "FAIL") << "\n";
  return out.str();
}

std::string format_plan_report(const PlanReport& report) {
  const BatchOptions& options = report.options;
  const Plan& plan = report.plan;
  std::ostringstream out;
  out << setup_line("plan", options);
  out << format("batch: %d row(s) x %d tokens\n\n", options.batch, options.seq_len);

  Table candidates(
      {"reorder", "imbalance", "tile eff", "skippable steps", "max bytes sent", "cost", "auto"});
  std::vector<std::string> pairs_header = {"reorder"};
  for (int rank = 0; rank < options.cp; ++rank) pairs_header.push_back(format("rank %d", rank));
  Table pairs(std::move(pairs_header));
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const ReorderAnalysis& analysis = plan.candidates[i];
    const int skippable =
        std::accumulate(analysis.skippable_steps.begin(), analysis.skippable_steps.end(), 0);
    const uint64_t max_bytes =
        analysis.bytes_sent.empty()
            ? 0
            : *std::max_element(analysis.bytes_sent.begin(), analysis.bytes_sent.end());
    candidates.add({analysis.label, format("%.3f", analysis.imbalance),
                    format("%.3f", analysis.tile_efficiency), std::to_string(skippable),
                    bytes(max_bytes), format("%.4g", analysis.cost),
                    int(i) == plan.chosen ? "*" : ""});
    std::vector<std::string> row = {analysis.label};
    for (int64_t count : analysis.visible_pairs) row.push_back(std::to_string(count));
    pairs.add(std::move(row));
  }
  out << "candidates (skippable steps summed over ranks):\n" << candidates.str() << "\n";
  out << "visible pairs per rank:\n" << pairs.str() << "\n";
  if (!plan.candidates.empty()) {
    out << "auto picks " << plan.candidates.at(size_t(plan.chosen)).label << ": "
        << plan.explanation << "\n";
  }
  return out.str();
}

std::string format_layout_report(const LayoutReport& report) {
  const BatchOptions& options = report.options;
  std::ostringstream out;
  out << format("ringpack layout: reorder %s, cp %d, %d row(s) x %d tokens\n",
                report.reorder.c_str(), options.cp, options.batch, options.seq_len);
  bool cut = false;
  for (const RankLayout& rank : report.ranks) {
    out << "rank " << rank.rank << ":\n";
    for (size_t row = 0; row < rank.tokens.size(); ++row) {
      cut = cut || rank.tokens[row].size() > kLayoutTokensShown;
      out << kIndent << "row " << row << ":\n" << layout_rows(rank, row);
    }
  }
  if (cut) {
    out << format("(rows cut after %zu tokens; --json prints every token)\n", kLayoutTokensShown);
  }
  return out.str();
}

}  // namespace ringpack::cli
