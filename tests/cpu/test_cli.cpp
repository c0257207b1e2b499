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
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace ringpack {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kExitSuccess = 0;
constexpr int kExitBadInput = 2;
constexpr int kSeedRange = 1000;       // --seed values stay short in repro commands
constexpr size_t kMaxErrorLine = 300;  // docs/design.md §5: one line, at most 300 characters

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

  // Runs `ringpack <args>`; "{dir}" in args stands for this test's folder. `shell_prefix` runs
  // first in the same shell (e.g. "ulimit -v N;").
  CliResult run(std::string args, const std::string& shell_prefix = "") const {
    for (size_t at = args.find("{dir}"); at != std::string::npos; at = args.find("{dir}")) {
      args.replace(at, std::string("{dir}").size(), dir_.string());
    }
    const std::string command = shell_prefix + "'" + RINGPACK_CLI_PATH + "' " + args + " >'" +
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

  // Runs a command that must fail as bad input: status 2, nothing on stdout, one printable line
  // of at most 300 characters on stderr that contains each of `named`.
  CliResult expect_bad_input(const std::string& args, const std::vector<std::string>& named = {},
                             const std::string& shell_prefix = "") const {
    const CliResult result = run(args, shell_prefix);
    EXPECT_EQ(result.status, kExitBadInput) << args << "\n" << result.err.substr(0, 400);
    EXPECT_EQ(result.out, "") << args;
    EXPECT_EQ(result.err.rfind("ringpack: error: ", 0), 0u) << result.err.substr(0, 400);
    EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << "more than one line:\n"
                                                            << result.err.substr(0, 400);
    EXPECT_LE(result.err.size(), kMaxErrorLine + 1) << result.err.substr(0, 400);
    for (size_t i = 0; i + 1 < result.err.size(); ++i) {
      const auto c = static_cast<unsigned char>(result.err[i]);
      EXPECT_TRUE(c >= 0x20 && c < 0x7f)
          << "byte " << int(c) << " at " << i << " of " << result.err.substr(0, 400);
      if (!(c >= 0x20 && c < 0x7f)) break;
    }
    for (const std::string& value : named) {
      EXPECT_NE(result.err.find(value), std::string::npos)
          << "'" << value << "' not in " << result.err;
    }
    return result;
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
  write_file("deep.json", "{\"segment_ids\": " + std::string(100000, '[') + "1" +
                              std::string(100000, ']') + "}");
  write_file("huge_string.json",
             "{\"segment_ids\": [[\"" + std::string(1 << 20, 'x') + "\\u001b[31m\\u0007\"]]}");
  write_file("unknown_layout_key.json", R"({"segment_ids": [[1, 1]], "position": [[0, 1]]})");
  write_file("duplicate_layout_key.json", R"({"segment_ids": [[1, 1]], "segment_ids": [[2, 2]]})");
  write_file("duplicate_key.yaml", "seq_len: 16\nseq_len: 32\n");
  write_file("heads.yaml", "heads_q: 100000\nheads_kv: 1\n");
  fs::create_directories(path("folder"));
  const BadInputCase& bad = GetParam();
  expect_bad_input(bad.args + " --quiet --output {dir}/result.json", bad.named);
  EXPECT_FALSE(fs::exists(path("result.json")));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().rfind(".result.json", 0), std::string::npos)
        << "temporary file left behind: " << entry.path();
  }
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
    {"unknown_config_key",
     "plan --config {dir}/unknown_key.yaml",
     {"seq_lenn", "did you mean 'seq_len'"}},
    {"duplicate_config_key", "plan --config {dir}/duplicate_key.yaml", {"seq_len", "twice"}},
    {"config_is_a_directory", "plan --config {dir}/folder", {"folder", "is a directory"}},
    {"layout_is_a_directory", "run --layout {dir}/folder", {"folder", "is a directory"}},
    {"deeply_nested_layout", "run --cp 1 --layout {dir}/deep.json", {"deep.json", "a list"}},
    {"deeply_nested_layout_plan", "plan --cp 1 --layout {dir}/deep.json", {"deep.json"}},
    {"deeply_nested_layout_layout", "layout --cp 1 --layout {dir}/deep.json", {"deep.json"}},
    {"huge_string_in_layout", "layout --layout {dir}/huge_string.json", {"xxxx", "bytes)"}},
    {"unknown_layout_key", "layout --layout {dir}/unknown_layout_key.json", {"'position'"}},
    {"duplicate_layout_key",
     "layout --layout {dir}/duplicate_layout_key.json",
     {"'segment_ids'", "twice"}},
    {"window_below_minus_one", "plan --seq-len 16 --window -5", {"--window -5"}},
    {"negative_threads", "run --seq-len 16 --threads -1", {"--threads -1", "1024"}},
    {"too_many_threads", "run --seq-len 16 --threads 100000", {"--threads 100000"}},
    {"huge_seq_len", "run --seq-len 2000000000", {"--seq-len 2000000000", "GiB"}},
    {"huge_head_dim", "run --head-dim 100000000", {"--head-dim 100000000", "GiB"}},
    {"huge_heads_in_config", "run --config {dir}/heads.yaml", {"--heads-q 100000", "GiB"}},
    {"huge_batch", "run --batch 100000000", {"--batch 100000000", "GiB"}},
    {"plan_huge_cp", "plan --cp 100000", {"--cp 100000", "GiB", "smaller --cp"}},
    {"padding_inside_a_document",
     "layout --cp 2 --segment-ids 1,0,1,2",
     {"segment id 1", "after padding at token 1"}},
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
    {"unknown_forward_schedule",
     "run --seq-len 16 --cp 2 --forward-schedule dynamic",
     {"--forward-schedule", "dynamic", "auto, grid or persistent"}},
    {"unknown_backward_schedule",
     "run --seq-len 16 --cp 2 --backward-schedule eager",
     {"--backward-schedule", "eager", "auto, grid or persistent"}},
    {"unknown_forward_overlap",
     "run --seq-len 16 --cp 2 --forward-overlap interleaved",
     {"--forward-overlap", "interleaved", "auto, warpgroup or pingpong"}},
    {"negative_sm_margin", "run --seq-len 16 --cp 2 --sm-margin -2", {"--sm-margin", "-2"}},
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

// --version names the source commit the binary was built from (cmake/source_commit.cmake): a
// clone of the repository has one, so "unknown" would mean the build lost track of it.
TEST_F(CliTest, VersionNamesTheSourceCommit) {
  const CliResult result = run("--version");
  EXPECT_EQ(result.status, kExitSuccess);
  EXPECT_TRUE(std::regex_search(result.out, std::regex("^ringpack [0-9a-f]{7,}"))) << result.out;
}

// The CUDA kernel choices are flags of run and bench, with their defaults in the help.
TEST_F(CliTest, RunAndBenchHelpShowTheKernelFlagsAndTheirDefaults) {
  for (const char* command : {"run", "bench"}) {
    const CliResult result = run(std::string(command) + " --help");
    EXPECT_EQ(result.status, kExitSuccess) << command;
    for (const auto& [flag, default_value] :
         {std::pair{"--forward-loop", "[auto]"}, std::pair{"--backward-loop", "[auto]"},
          std::pair{"--backward-grad-add", "[auto]"}, std::pair{"--backward-head-splits", "[0]"},
          std::pair{"--forward-schedule", "[auto]"}, std::pair{"--backward-schedule", "[auto]"},
          std::pair{"--forward-overlap", "[auto]"}, std::pair{"--sm-margin", "[0]"}}) {
      // The flag's own line (other flags' help may name it).
      const size_t at = result.out.find("\n  " + std::string(flag) + " ");
      ASSERT_NE(at, std::string::npos) << command << " --help lacks " << flag << "\n" << result.out;
      const std::string line = result.out.substr(at + 1, result.out.find('\n', at + 1) - at - 1);
      EXPECT_NE(line.find(default_value), std::string::npos) << line;
    }
  }
}

// A --name/--no-name pair shows the flag in effect by default, so packing and causal masks do
// not read as off; the communicator options show their choices and default.
TEST_F(CliTest, RunHelpShowsBooleanPairsAndCommunicatorDefaults) {
  const CliResult result = run("run --help");
  EXPECT_EQ(result.status, kExitSuccess);
  for (const char* text :
       {"--packing,--no-packing [--packing]", "--causal,--non-causal [--causal]",
        "--backward,--no-backward [--backward]", "how ranks talk: threads (CPU ranks",
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
             "packing: false\n"
             "lengths: fixed\n"
             "doc_length: 4\n"
             "cp: 2\n"
             "seq_len: 16\n"
             "backend: reference\n"
             "forward_loop: mma_sync\n");
  // Load balancing off: contiguous.
  const json layout = run_json("layout --config {dir}/seed.yaml --json");
  EXPECT_EQ(layout.value("reorder", ""), "contiguous");
  EXPECT_EQ(layout.at("ranks").size(), 2u);
  EXPECT_EQ(rank_field(layout, "segment_ids"),
            (std::vector<std::vector<int>>{{1, 1, 1, 1, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}}));
  EXPECT_EQ(run_json("plan --config {dir}/seed.yaml --json").value("strategy", ""), "all_gather");
}

TEST_F(CliTest, ConfigLoadBalanceThatContradictsTheReorderIsAnError) {
  write_file("off.yaml",
             "context_parallel_load_balance: false\n"
             "context_parallel_reorder_strategy: dual_chunk_swap\n"
             "seq_len: 16\n");
  expect_bad_input(
      "layout --quiet --config {dir}/off.yaml",
      {"context_parallel_load_balance: false conflicts with reorder 'dual_chunk_swap'"});
  write_file("on.yaml",
             "context_parallel_load_balance: true\n"
             "reorder: contiguous\n"
             "seq_len: 16\n");
  expect_bad_input("layout --quiet --config {dir}/on.yaml",
                   {"context_parallel_load_balance: true conflicts with reorder 'contiguous'"});
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
          "--backward-grad-add atomics --backward-head-splits 2 --forward-schedule persistent "
          "--backward-schedule persistent --forward-overlap pingpong --sm-margin 4");
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

// plan and layout report progress on stderr like run (--quiet: none); stdout holds the report.
TEST_F(CliTest, PlanAndLayoutPrintProgressOnStderr) {
  const CliResult plan = run("plan --seq-len 64 --cp 4 --json");
  ASSERT_EQ(plan.status, kExitSuccess) << plan.err;
  EXPECT_NE(plan.err.find("[ringpack] analysing dual_chunk_swap"), std::string::npos) << plan.err;
  EXPECT_EQ(json::parse(plan.out).at("cp"), 4);
  const CliResult layout = run("layout --seq-len 64 --cp 4");
  EXPECT_NE(layout.err.find("[ringpack] placing 1 x 64 tokens on 4 ranks"), std::string::npos)
      << layout.err;
  EXPECT_EQ(run("layout --seq-len 64 --cp 4 --quiet").err, "");
}

// A long value with control bytes is quoted as a short escaped excerpt, and the fix survives,
// for every option that names one of a set.
TEST_F(CliTest, ErrorsQuoteAShortEscapedExcerptOfABadValue) {
  const std::string value = "\"$(printf 'zz\\033[31m\\007')" + std::string(5000, 'y') + "\"";
  for (const auto& [command, fix] :
       {std::pair{"layout --quiet --reorder ", "use auto, contiguous"},
        std::pair{"run --quiet --seq-len 16 --cp 2 --backend ", "use reference, cpu or cuda"},
        std::pair{"run --quiet --seq-len 16 --cp 2 --comm ", "use threads, device, mpi or nccl"},
        std::pair{"run --quiet --seq-len 16 --cp 2 --strategy ", "use ring or all_gather"},
        std::pair{"run --quiet --seq-len 16 --cp 2 --dtype ", "use fp32, bf16 or fp16"},
        std::pair{"run --quiet --seq-len 16 --cp 2 --forward-schedule ",
                  "use auto, grid or persistent"}}) {
    const CliResult result =
        expect_bad_input(command + value, {"zz\\x1b[31m\\x07yyy", "5008 bytes)", fix});
    EXPECT_LT(result.err.size(), 200u) << result.err;
  }
}

// bench has no --output: its bad input is checked here.
TEST_F(CliTest, BenchRejectsBadWorkloadsAndAMissingLayoutsOut) {
  expect_bad_input("bench --layouts-only", {"--layouts-out"});
  expect_bad_input("bench --workloads packed-2097152k", {"2097152k", "65536k"});
  expect_bad_input("bench --workloads dense-abck", {"dense-abck", "'abc'"});
}

// bench runs behind the backend interface: on the CPU backend it times and checks a small
// workload (forward and backward against the fp64 reference) and reports it in the JSON.
TEST_F(CliTest, BenchOnTheCpuBackendChecksForwardAndBackward) {
  const CliResult result =
      run("bench --backend cpu --workloads packed-1k --heads-q 2 --heads-kv 1 --head-dim 16 "
          "--warmup 1 --reps 2 --deterministic --json {dir}/bench.json");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("cpu backend"), std::string::npos) << result.out;
  const json bench = json::parse(read_text(path("bench.json")));
  EXPECT_EQ(bench.at("backend"), "cpu");
  // The header and the JSON name the choices in effect, --deterministic among them.
  EXPECT_NE(result.out.find("--forward-overlap auto --sm-margin 0 --deterministic\n"),
            std::string::npos)
      << result.out;
  EXPECT_NE(bench.at("kernels").get<std::string>().find("--deterministic"), std::string::npos);
  const json& entry = bench.at("results").at(0);
  EXPECT_EQ(entry.at("pass"), "yes");
  std::vector<std::string> tensors;
  for (const json& check : entry.at("checks")) {
    tensors.push_back(check.at("tensor"));
    EXPECT_TRUE(check.at("passed").get<bool>()) << check.dump();
  }
  EXPECT_EQ(tensors, (std::vector<std::string>{"out", "lse", "dq", "dk", "dv"}));
  EXPECT_GT(entry.at("bwd_ms").get<double>(), 0.0);

  const CliResult unchecked =
      run("bench --backend cpu --workloads dense-1k --heads-q 2 --heads-kv 1 --head-dim 16 "
          "--warmup 0 --reps 1 --no-verify --no-backward");
  ASSERT_EQ(unchecked.status, 0) << unchecked.err;
  EXPECT_NE(unchecked.err.find("verification off"), std::string::npos) << unchecked.err;
  EXPECT_EQ(unchecked.out.find("--deterministic"), std::string::npos) << unchecked.out;
}

// Sizes past the limits are rejected before anything large is allocated: under a 1 GiB
// address-space limit they still get the size message, not an allocation failure.
TEST_F(CliTest, SizeLimitsAreCheckedBeforeAllocating) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit";
#endif
  write_file("heads.yaml", "heads_q: 100000\nheads_kv: 1\n");
  const std::string limit = "ulimit -v 1048576; ";
  for (const char* args : {"run --quiet --seq-len 2000000000", "run --quiet --head-dim 100000000",
                           "run --quiet --config {dir}/heads.yaml", "run --quiet --batch 100000000",
                           "plan --quiet --cp 100000", "plan --quiet --batch 100000000",
                           "layout --quiet --seq-len 2000000000"}) {
    SCOPED_TRACE(args);
    expect_bad_input(args, {"needs about", "GiB"}, limit);
  }
}

// A rank thread or CPU worker that cannot start (here: no address space for its stack) ends the
// run with one line, after the threads already started were joined (no std::terminate).
TEST_F(CliTest, ThreadsThatCannotStartEndTheRunWithOneLine) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers reserve more address space than the limit";
#endif
  const std::string limit = "ulimit -v 1048576; ";
  expect_bad_input("run --quiet --cp 512 --seq-len 1024 --no-verify",
                   {"could not start the thread of rank", "--cp"}, limit);
  expect_bad_input("run --quiet --cp 1 --seq-len 16384 --threads 1024 --no-verify",
                   {"could not start CPU worker thread", "--threads"}, limit);
}

TEST_F(CliTest, RunWithoutVerificationSaysNotVerifiedAndExitsZero) {
  const CliResult text = run("run --seq-len 32 --cp 2 --quiet --no-verify");
  ASSERT_EQ(text.status, kExitSuccess) << text.err;
  EXPECT_EQ(text.out.find("PASS"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.substr(text.out.size() - std::string("\nNOT VERIFIED\n").size()),
            "\nNOT VERIFIED\n");

  const json report = run_json("run --seq-len 32 --cp 2 --quiet --no-verify --json");
  EXPECT_EQ(report.at("verified"), false);
  EXPECT_TRUE(report.at("passed").is_null()) << report.dump(2);
}

// The JSON report holds the whole configuration that produced it.
TEST_F(CliTest, RunJsonRecordsTheConfiguration) {
  const json report = run_json(
      "run --seq-len 32 --cp 2 --quiet --json --heads-q 6 --heads-kv 3 --head-dim 8 --dtype fp32 "
      "--non-causal --window 5 --seed 7 --threads 1 --backend reference --strategy all_gather "
      "--reorder striped:2");
  EXPECT_EQ(report.at("passed"), true);
  EXPECT_EQ(report.at("heads_q"), 6);
  EXPECT_EQ(report.at("heads_kv"), 3);
  EXPECT_EQ(report.at("head_dim"), 8);
  EXPECT_EQ(report.at("dtype"), "fp32");
  EXPECT_EQ(report.at("causal"), false);
  EXPECT_EQ(report.at("window"), 5);
  EXPECT_EQ(report.at("seed"), 7);
  EXPECT_EQ(report.at("threads"), 1);
  EXPECT_EQ(report.at("backend"), "reference");
  EXPECT_EQ(report.at("strategy"), "all_gather");
  EXPECT_EQ(report.at("reorder"), "striped:2");
  EXPECT_EQ(report.at("cp"), 2);
  EXPECT_EQ(report.at("seq_len"), 32);
  EXPECT_EQ(report.at("batch"), 1);
}

// With load balance on (the default), auto picks a balanced reorder, also on the CPU backends.
TEST_F(CliTest, DefaultRunPicksABalancedReorder) {
  for (const char* backend : {"cpu", "reference"}) {
    const json report = run_json(std::string("run --seq-len 256 --cp 4 --quiet --json --no-verify "
                                             "--backend ") +
                                 backend);
    EXPECT_NE(report.value("reorder", "contiguous"), "contiguous") << backend;
  }
  EXPECT_NE(run_json("plan --json --backend cuda").value("auto", "contiguous"), "contiguous");
}

// --output replaces a symbolic link's target and keeps the link.
TEST_F(CliTest, OutputThroughASymlinkReplacesItsTarget) {
  write_file("target.json", "old");
  fs::create_symlink("target.json", path("link.json"));
  const CliResult result = run("layout --seq-len 16 --cp 2 --json --output {dir}/link.json");
  ASSERT_EQ(result.status, kExitSuccess) << result.err;
  EXPECT_TRUE(fs::is_symlink(path("link.json")));
  EXPECT_EQ(json::parse(read_text(path("target.json"))).at("cp"), 2);
}

// A run that fails as bad input leaves an existing --output file as it was, and no temporary file.
TEST_F(CliTest, BadInputLeavesTheOutputFileAlone) {
  write_file("report.json", "previous");
  expect_bad_input("run --quiet --seq-len 10 --cp 4 --output {dir}/report.json", {"10"});
  EXPECT_EQ(read_text(path("report.json")), "previous");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3)
      << "report.json, stdout.txt and stderr.txt only";
}

// Concurrent writers to one --output each write their own temporary file: both succeed and the
// file holds one whole report.
TEST_F(CliTest, ConcurrentRunsToOneOutputFileBothSucceed) {
  const std::string layout = std::string("'") + RINGPACK_CLI_PATH +
                             "' layout --seq-len 4096 --json --output '" +
                             path("shared.json").string() + "' --quiet";
  const fs::path script = write_file(
      "both.sh", layout + " & first=$!\n" + layout + " & second=$!\nwait $first && wait $second\n");
  ASSERT_EQ(std::system(("sh '" + script.string() + "'").c_str()), 0);
  EXPECT_EQ(json::parse(read_text(path("shared.json"))).at("seq_len"), 4096);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2)
      << "both.sh and shared.json only";
}

}  // namespace
}  // namespace ringpack
