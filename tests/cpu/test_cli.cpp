// End-to-end tests of the `ringpack` binary (apps/): bad input exits 2 with one line naming the
// value and leaves no output file; `layout` reproduces the docs/design.md §3 examples; `plan
// --json` has its fields; the YAML config maps the seed system's names and flags override it; `run`
// passes verification on small adversarial layouts for every strategy, reorder and dtype.
//
// Each test runs the binary (RINGPACK_CLI_PATH) with std::system, stdout and stderr redirected to
// files in a fresh temporary folder named after the test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace ringpack {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kExitSuccess = 0;
constexpr int kExitBadInput = 2;
constexpr int kSeedRange = 1000;  // --seed values stay short in repro commands

struct CliResult {
  int status = -1;
  std::string out;
  std::string err;
};

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// "name" of the running test, '/' replaced (parameterised names contain it).
std::string test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ringpack_cli_" + test_name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path path(const std::string& name) const { return dir_ / name; }

  fs::path write_file(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  // Runs `ringpack <args>`; "{dir}" in args stands for this test's folder.
  CliResult run(std::string args) const {
    for (size_t at = args.find("{dir}"); at != std::string::npos; at = args.find("{dir}")) {
      args.replace(at, std::string("{dir}").size(), dir_.string());
    }
    const std::string command = std::string("'") + RINGPACK_CLI_PATH + "' " + args + " >'" +
                                path("stdout.txt").string() + "' 2>'" +
                                path("stderr.txt").string() + "'";
    const int raw = std::system(command.c_str());
    CliResult result;
    result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    result.out = read_text(path("stdout.txt"));
    result.err = read_text(path("stderr.txt"));
    return result;
  }

  // Runs a command that must succeed and print JSON.
  json run_json(const std::string& args) const {
    const CliResult result = run(args);
    EXPECT_EQ(result.status, kExitSuccess) << "ringpack " << args << "\n" << result.err;
    if (result.status != kExitSuccess) return json::object();
    return json::parse(result.out);
  }

  fs::path dir_;
};

std::vector<std::vector<int>> rank_field(const json& layout, const std::string& field) {
  std::vector<std::vector<int>> values;
  for (const json& rank : layout.at("ranks")) values.push_back(rank.at(field));
  return values;
}

// ---- bad input ------------------------------------------------------------------------------

struct BadInputCase {
  std::string name;
  std::string args;
  std::vector<std::string> named;  // substrings the error line must contain
};

void PrintTo(const BadInputCase& bad, std::ostream* out) {
  *out << bad.name;
}

class CliBadInput : public CliTest, public ::testing::WithParamInterface<BadInputCase> {};

TEST_P(CliBadInput, ExitsTwoWithOneLineNamingTheValueAndNoOutputFile) {
  write_file("malformed.json", "{\"segment_ids\": [[1, 1], [0, 0]");
  write_file("unknown_key.yaml", "cp: 2\nseq_lenn: 16\n");
  write_file("wrong_type.yaml", "seq_len: many\n");
  const BadInputCase& bad = GetParam();
  const CliResult result = run(bad.args + " --output {dir}/result.json");

  EXPECT_EQ(result.status, kExitBadInput) << bad.args;
  EXPECT_EQ(result.out, "");
  ASSERT_FALSE(result.err.empty());
  EXPECT_EQ(result.err.rfind("ringpack: error: ", 0), 0u) << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << "more than one line:\n" << result.err;
  for (const std::string& value : bad.named) {
    EXPECT_NE(result.err.find(value), std::string::npos)
        << "'" << value << "' not in " << result.err;
  }
  EXPECT_FALSE(fs::exists(path("result.json")));
  EXPECT_FALSE(fs::exists(path("result.json.tmp")));
}

const BadInputCase kBadInputs[] = {
    {"seq_len_not_divisible_by_cp", "layout --seq-len 10 --cp 4 --reorder contiguous", {"10"}},
    {"dual_chunk_swap_needs_2cp",
     "layout --seq-len 12 --cp 4 --reorder dual_chunk_swap",
     {"dual_chunk_swap", "12"}},
    {"stripe_size_zero",
     "layout --seq-len 16 --cp 4 --reorder striped --stripe-size 0",
     {"--stripe-size 0"}},
    {"striped_needs_cp_times_stripe",
     "layout --seq-len 16 --cp 4 --reorder striped:3",
     {"stripe size 3", "16"}},
    {"unknown_strategy", "plan --seq-len 16 --strategy spiral", {"spiral"}},
    {"unknown_reorder", "layout --seq-len 16 --reorder zigzag", {"zigzag"}},
    {"unknown_dtype", "run --seq-len 16 --dtype fp8", {"fp8"}},
    {"negative_segment_id", "layout --cp 2 --segment-ids=1,1,-3,0", {"-3"}},
    {"reappearing_segment_id", "layout --cp 2 --segment-ids 1,1,2,2,1,1,0,0", {"segment id 1"}},
    {"heads_not_divisible", "run --seq-len 16 --cp 2 --heads-q 3 --heads-kv 2", {"3", "2"}},
    {"malformed_layout_file", "layout --cp 2 --layout {dir}/malformed.json", {"malformed.json"}},
    {"missing_layout_file", "layout --cp 2 --layout {dir}/absent.json", {"absent.json"}},
    {"unknown_config_key", "plan --config {dir}/unknown_key.yaml", {"seq_lenn", "seq_len,"}},
    {"config_value_wrong_type", "plan --config {dir}/wrong_type.yaml", {"seq_len", "many"}},
    {"flag_value_not_a_number", "plan --seq-len lots", {"lots"}},
    {"unknown_flag", "layout --seq-len 16 --shards 4", {"--shards"}},
    {"unknown_forward_loop",
     "run --seq-len 16 --cp 2 --forward-loop fast",
     {"--forward-loop", "fast"}},
    {"unknown_backward_loop",
     "run --seq-len 16 --cp 2 --backward-loop wmma",
     {"--backward-loop", "wmma"}},
    {"unknown_gradient_add",
     "run --seq-len 16 --cp 2 --backward-grad-add sometimes",
     {"--backward-grad-add", "sometimes"}},
    {"negative_head_splits",
     "run --seq-len 16 --cp 2 --backward-head-splits -1",
     {"--backward-head-splits", "-1"}},
};

INSTANTIATE_TEST_SUITE_P(Cli, CliBadInput, ::testing::ValuesIn(kBadInputs),
                         [](const ::testing::TestParamInfo<BadInputCase>& param) {
                           return param.param.name;
                         });

TEST_F(CliTest, NoArgumentsPrintsHelpAndExitsZero) {
  const CliResult result = run("");
  EXPECT_EQ(result.status, kExitSuccess);
  EXPECT_NE(result.out.find("run"), std::string::npos);
  EXPECT_NE(result.out.find("layout"), std::string::npos);
}

// The CUDA kernel choices are flags of run and bench, with their defaults in the help.
TEST_F(CliTest, RunAndBenchHelpShowTheKernelFlagsAndTheirDefaults) {
  for (const char* command : {"run", "bench"}) {
    const CliResult result = run(std::string(command) + " --help");
    EXPECT_EQ(result.status, kExitSuccess) << command;
    for (const char* flag :
         {"--forward-loop", "--backward-loop", "--backward-grad-add", "--backward-head-splits"}) {
      const size_t at = result.out.find(flag);
      ASSERT_NE(at, std::string::npos) << command << " --help lacks " << flag << "\n" << result.out;
      const std::string line = result.out.substr(at, result.out.find('\n', at) - at);
      const bool splits = std::string(flag) == "--backward-head-splits";
      EXPECT_NE(line.find(splits ? "[0]" : "[auto]"), std::string::npos) << line;
    }
  }
}

// A --name/--no-name pair shows the flag in effect by default, so packing and causal masks do
// not read as off; the communicator options show their choices and default.
TEST_F(CliTest, RunHelpShowsBooleanPairsAndCommunicatorDefaults) {
  const CliResult result = run("run --help");
  EXPECT_EQ(result.status, kExitSuccess);
  for (const char* text : {"--packing,--no-packing [--packing]", "--causal,--non-causal [--causal]",
                           "--backward,--no-backward [--backward]", "{threads,device,mpi,nccl}",
                           "--comm-timeout FLOAT [300]", "--trace"}) {
    EXPECT_NE(result.out.find(text), std::string::npos) << "run --help lacks " << text << "\n"
                                                        << result.out;
  }
  EXPECT_EQ(result.out.find("{false}"), std::string::npos) << result.out;
}

TEST_F(CliTest, VerbosePrintsWhereTheErrorWasRaised) {
  const CliResult plain = run("layout --seq-len 10 --cp 4 --reorder contiguous");
  const CliResult verbose = run("layout --seq-len 10 --cp 4 --reorder contiguous --verbose");
  EXPECT_EQ(verbose.status, kExitBadInput);
  EXPECT_EQ(plain.err.find("where"), std::string::npos);
  EXPECT_NE(verbose.err.find("ringpack: where: "), std::string::npos) << verbose.err;
}

// ---- layout: docs/design.md §3 examples
// ----------------------------------------------------------

TEST_F(CliTest, LayoutDualChunkSwapMatchesDesignExample) {
  const json layout = run_json("layout --seq-len 16 --cp 4 --reorder dual_chunk_swap --json");
  EXPECT_EQ(layout.value("reorder", ""), "dual_chunk_swap");
  const std::vector<std::vector<int>> expected = {
      {0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
  EXPECT_EQ(rank_field(layout, "tokens"), expected);
}

TEST_F(CliTest, LayoutStripedStripeOneMatchesDesignExample) {
  const json layout = run_json("layout --seq-len 16 --cp 4 --reorder striped --json");
  EXPECT_EQ(layout.value("reorder", ""), "striped");
  const std::vector<std::vector<int>> expected = {
      {0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
  EXPECT_EQ(rank_field(layout, "tokens"), expected);
}

TEST_F(CliTest, LayoutStripedStripeTwoMatchesDesignExample) {
  const json layout =
      run_json("layout --seq-len 16 --cp 4 --reorder striped --stripe-size 2 --json");
  EXPECT_EQ(layout.value("reorder", ""), "striped:2");
  const std::vector<std::vector<int>> expected = {
      {0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}};
  EXPECT_EQ(rank_field(layout, "tokens"), expected);
  // The label form gives the same layout.
  EXPECT_EQ(rank_field(run_json("layout --seq-len 16 --cp 4 --reorder striped:2 --json"), "tokens"),
            expected);
}

TEST_F(CliTest, LayoutPackedSegmentIdsMatchDesignExample) {
  const json layout = run_json(
      "layout --cp 2 --reorder striped --json "
      "--segment-ids 1,1,1,1,1,1,2,2,2,2,2,2,2,2,0,0");
  const std::vector<std::vector<int>> ids = {{1, 1, 1, 2, 2, 2, 2, 0}, {1, 1, 1, 2, 2, 2, 2, 0}};
  const std::vector<std::vector<int>> positions = {{0, 2, 4, 0, 2, 4, 6, 0},
                                                   {1, 3, 5, 1, 3, 5, 7, 0}};
  EXPECT_EQ(rank_field(layout, "segment_ids"), ids);
  EXPECT_EQ(rank_field(layout, "positions"), positions);
}

TEST_F(CliTest, LayoutWithSeveralRowsListsEveryRowAndKeepsRowZeroOnTop) {
  write_file("two_rows.json",
             R"({"segment_ids": [[1, 1, 2, 2, 2, 2, 0, 0], [3, 3, 3, 3, 3, 3, 3, 3]]})");
  const json layout =
      run_json("layout --cp 2 --reorder contiguous --layout {dir}/two_rows.json --json");
  ASSERT_EQ(layout.at("ranks").size(), 2u);
  const json& rank1 = layout.at("ranks").at(1);
  ASSERT_EQ(rank1.at("rows").size(), 2u);
  EXPECT_EQ(rank1.at("tokens"), rank1.at("rows").at(0).at("tokens"));
  EXPECT_EQ(rank1.at("segment_ids"), json({2, 2, 0, 0}));
  EXPECT_EQ(rank1.at("rows").at(1).at("segment_ids"), json({3, 3, 3, 3}));
  EXPECT_EQ(rank1.at("rows").at(1).at("positions"), json({4, 5, 6, 7}));
}

TEST_F(CliTest, LayoutTextCutsLongRowsWithANote) {
  const CliResult result = run("layout --seq-len 256 --cp 2 --reorder contiguous");
  ASSERT_EQ(result.status, kExitSuccess) << result.err;
  EXPECT_NE(result.out.find("more)"), std::string::npos);
  EXPECT_NE(result.out.find("--json prints every token"), std::string::npos);
  EXPECT_EQ(result.out.find(" 127 "), std::string::npos) << "row was not cut";
}

// ---- plan -----------------------------------------------------------------------------------

TEST_F(CliTest, PlanJsonHasEveryFieldPerCandidate) {
  constexpr int kCp = 4;
  const json plan = run_json("plan --seq-len 64 --cp 4 --lengths uniform --uniform-max 24 --json");
  const json& reorders = plan.at("reorders");
  for (const char* label : {"contiguous", "dual_chunk_swap", "striped"}) {
    ASSERT_TRUE(reorders.contains(label)) << label;
    const json& candidate = reorders.at(label);
    EXPECT_EQ(candidate.at("visible_pairs").size(), size_t(kCp));
    EXPECT_EQ(candidate.at("bytes_sent").size(), size_t(kCp));
    EXPECT_EQ(candidate.at("skippable_steps").size(), size_t(kCp));
    EXPECT_TRUE(candidate.at("imbalance").is_number());
    EXPECT_TRUE(candidate.at("tile_efficiency").is_number());
    EXPECT_TRUE(candidate.at("cost").is_number());
  }
  EXPECT_TRUE(reorders.contains(plan.at("auto").get<std::string>()));
  EXPECT_FALSE(plan.at("explanation").get<std::string>().empty());
}

TEST_F(CliTest, PlanTextMarksTheAutoChoice) {
  const CliResult result = run("plan --seq-len 64 --cp 4 --lengths fixed --doc-length 16");
  ASSERT_EQ(result.status, kExitSuccess) << result.err;
  EXPECT_NE(result.out.find("auto picks "), std::string::npos) << result.out;
}

// ---- config ---------------------------------------------------------------------------------

TEST_F(CliTest, ConfigSeedNamesMapToOptions) {
  write_file("seed.yaml",
             "context_parallel_strategy: all_gather\n"
             "context_parallel_load_balance: false\n"
             "context_parallel_reorder_strategy: striped\n"
             "packing: false\n"
             "lengths: fixed\n"
             "doc_length: 4\n"
             "cp: 2\n"
             "seq_len: 16\n"
             "backend: reference\n"
             "forward_loop: mma_sync\n");
  // Load balancing off wins over the reorder strategy: contiguous.
  const json layout = run_json("layout --config {dir}/seed.yaml --json");
  EXPECT_EQ(layout.value("reorder", ""), "contiguous");
  EXPECT_EQ(layout.at("ranks").size(), 2u);
  EXPECT_EQ(rank_field(layout, "segment_ids"),
            (std::vector<std::vector<int>>{{1, 1, 1, 1, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}}));
  EXPECT_EQ(run_json("plan --config {dir}/seed.yaml --json").value("strategy", ""), "all_gather");
}

TEST_F(CliTest, ConfigReorderStrategyAppliesWhenLoadBalanceIsOn) {
  write_file("balanced.yaml",
             "context_parallel_load_balance: true\n"
             "context_parallel_reorder_strategy: striped\n"
             "seq_len: 16\n");
  EXPECT_EQ(run_json("layout --config {dir}/balanced.yaml --json").value("reorder", ""), "striped");
}

TEST_F(CliTest, FlagsOverrideConfig) {
  write_file("seed.yaml",
             "context_parallel_strategy: all_gather\n"
             "context_parallel_load_balance: false\n"
             "packing: false\n"
             "lengths: fixed\n"
             "doc_length: 4\n"
             "cp: 2\n"
             "seq_len: 16\n");
  const json layout =
      run_json("layout --config {dir}/seed.yaml --cp 4 --reorder striped --packing --json");
  EXPECT_EQ(layout.value("reorder", ""), "striped");
  EXPECT_EQ(layout.at("ranks").size(), 4u);
  EXPECT_EQ(layout.at("ranks").at(0).at("segment_ids"), json({1, 2, 3, 4}));
  EXPECT_EQ(run_json("plan --config {dir}/seed.yaml --strategy ring --json").value("strategy", ""),
            "ring");
}

TEST_F(CliTest, ConfigLayoutPathIsRelativeToTheConfigFile) {
  fs::create_directories(path("configs"));
  write_file("configs/tiny.json", R"({"segment_ids": [[1, 1, 1, 2, 2, 2, 0, 0]]})");
  write_file("configs/tiny.yaml", "layout: tiny.json\ncp: 2\nreorder: contiguous\n");
  const json layout = run_json("layout --config {dir}/configs/tiny.yaml --json");
  EXPECT_EQ(rank_field(layout, "segment_ids"),
            (std::vector<std::vector<int>>{{1, 1, 1, 2}, {2, 2, 0, 0}}));
}

// ---- run ------------------------------------------------------------------------------------

// Small layouts that stress CP (docs/design.md §7), cp = 4.
struct RunLayout {
  std::string name;
  std::string json;
};

const RunLayout kRunLayouts[] = {
    // Documents of 2 and 1 tokens, shorter than cp.
    {"doc_shorter_than_cp", R"({"segment_ids": [[1,1,1,1,1,1,1,1,1,2,2,3,4,4,4,4]]})"},
    // Document 1 (3 tokens) has no token on some ranks under every reorder.
    {"doc_absent_from_rank",
     R"({"segment_ids": [[1,1,1,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2]]})"},
    // Interior and tail padding, explicit positions.
    {"interior_and_tail_padding",
     R"({"segment_ids": [[1,1,1,1,1,1,1,1,1,1,0,0,0,0,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,
                         0,0,3,3,3,3,3,3,3,3,0,0,0,0]],
         "positions":   [[0,1,2,3,4,5,6,7,8,9,0,0,0,0,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,
                         17,18,19,0,0,0,1,2,3,4,5,6,7,0,0,0,0]]})"},
    // Two rows with different layouts; the second is all padding.
    {"second_row_all_padding",
     R"({"segment_ids": [[1,1,1,1,1,2,2,2,2,2,2,2,2,2,2,2], [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]})"},
};

struct RunCase {
  RunLayout layout;
  std::string strategy;
  std::string dtype;
};

void PrintTo(const RunCase& run_case, std::ostream* out) {
  *out << run_case.layout.name << "/" << run_case.strategy << "/" << run_case.dtype;
}

std::vector<RunCase> run_cases() {
  std::vector<RunCase> cases;
  for (const RunLayout& layout : kRunLayouts) {
    for (const char* strategy : {"ring", "all_gather"}) {
      for (const char* dtype : {"fp32", "bf16"}) cases.push_back({layout, strategy, dtype});
    }
  }
  return cases;
}

class CliRun : public CliTest, public ::testing::WithParamInterface<RunCase> {};

// Every number of a JSON tree is finite (non-finite values would be strings).
void expect_finite_numbers(const json& value, const std::string& where) {
  if (value.is_number()) {
    EXPECT_TRUE(std::isfinite(value.get<double>())) << where;
  } else if (value.is_string()) {
    const std::string text = value.get<std::string>();
    EXPECT_TRUE(text != "inf" && text != "-inf" && text != "nan") << where << " = " << text;
  } else if (value.is_structured()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      expect_finite_numbers(*it, where + "/" + (value.is_object() ? it.key() : "[]"));
    }
  }
}

TEST_P(CliRun, PassesVerificationForEveryReorder) {
  constexpr int kCp = 4;
  const RunCase& run_case = GetParam();
  write_file("layout.json", run_case.layout.json);
  const std::string seed = std::to_string(std::hash<std::string>{}(test_name()) % kSeedRange);
  for (const char* reorder : {"contiguous", "dual_chunk_swap", "striped", "striped:2", "auto"}) {
    const std::string args = "run --layout {dir}/layout.json --cp 4 --reorder " +
                             std::string(reorder) + " --strategy " + run_case.strategy +
                             " --dtype " + run_case.dtype + " --seed " + seed +
                             " --heads-q 2 --heads-kv 1 --head-dim 16 --threads 1 --verify "
                             "--quiet --json";
    SCOPED_TRACE(args);
    const json report = run_json(args);
    ASSERT_FALSE(report.empty());
    EXPECT_TRUE(report.at("passed").get<bool>()) << report.dump(2);
    EXPECT_TRUE(report.at("verified").get<bool>());
    EXPECT_EQ(report.at("strategy"), run_case.strategy);
    EXPECT_EQ(report.at("dtype"), run_case.dtype);
    EXPECT_EQ(report.at("cp"), kCp);
    if (std::string(reorder) != "auto") {
      EXPECT_EQ(report.at("reorder"), reorder);
    }
    for (const char* tensor : {"out", "lse", "dq", "dk", "dv"}) {
      ASSERT_TRUE(report.at("verify").contains(tensor)) << tensor;
      EXPECT_TRUE(report.at("verify").at(tensor).at("passed").get<bool>()) << tensor;
    }
    ASSERT_EQ(report.at("ranks").size(), size_t(kCp));
    for (const char* field : {"rank", "visible_pairs", "steps_computed", "steps_skipped",
                              "bytes_sent", "forward_ms", "backward_ms", "wait_ms"}) {
      EXPECT_TRUE(report.at("ranks").at(0).contains(field)) << field;
    }
    expect_finite_numbers(report, "");
  }
}

INSTANTIATE_TEST_SUITE_P(Cli, CliRun, ::testing::ValuesIn(run_cases()),
                         [](const ::testing::TestParamInfo<RunCase>& param) {
                           return param.param.layout.name + "_" + param.param.strategy + "_" +
                                  param.param.dtype;
                         });

TEST_F(CliTest, RunTextReportEndsWithPass) {
  const CliResult result =
      run("run --seq-len 32 --cp 2 --lengths fixed --doc-length 8 --head-dim 16 --dtype fp32 "
          "--threads 1");
  ASSERT_EQ(result.status, kExitSuccess) << result.err;
  EXPECT_EQ(result.out.substr(result.out.size() - std::string("\nPASS\n").size()), "\nPASS\n");
  EXPECT_NE(result.out.find("imbalance"), std::string::npos);
  EXPECT_EQ(result.out.find("[ringpack] "), std::string::npos) << "progress on stdout";
  EXPECT_NE(result.err.find("[ringpack] "), std::string::npos) << "no progress on stderr";
}

// The kernel flags choose CUDA kernels; the CPU backends accept and ignore them.
TEST_F(CliTest, RunOnTheCpuAcceptsTheKernelFlags) {
  const CliResult result =
      run("run --seq-len 32 --cp 2 --lengths fixed --doc-length 8 --head-dim 16 --dtype fp32 "
          "--threads 1 --quiet --forward-loop mma_sync --backward-loop wgmma "
          "--backward-grad-add atomics --backward-head-splits 2");
  ASSERT_EQ(result.status, kExitSuccess) << result.err;
  EXPECT_EQ(result.out.substr(result.out.size() - std::string("\nPASS\n").size()), "\nPASS\n");
}

TEST_F(CliTest, RunOutputFileHoldsTheJsonAndNothingIsPrinted) {
  const CliResult result =
      run("run --seq-len 32 --cp 2 --lengths fixed --doc-length 8 --head-dim 16 --dtype fp32 "
          "--threads 1 --quiet --json --output {dir}/report.json");
  ASSERT_EQ(result.status, kExitSuccess) << result.err;
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "");
  EXPECT_FALSE(fs::exists(path("report.json.tmp")));
  const json report = json::parse(read_text(path("report.json")));
  EXPECT_TRUE(report.at("passed").get<bool>());
  EXPECT_EQ(report.at("seq_len"), 32);
}

}  // namespace
}  // namespace ringpack
