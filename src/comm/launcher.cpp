// read_launcher_env and launcher_device (launcher.h).
#include "comm/launcher.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

#include "ringpack/error.h"

namespace ringpack {
namespace {

// The variables of one launcher: rank and size (both required once either is set), local rank
// and local size (optional).
struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // nullptr: the launcher has its own rule (Slurm)
};

constexpr LauncherVars kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

constexpr const char* kFixLauncher =
    "the launcher sets it for every process; fix the launch command, or unset it to run as a "
    "single process";

// The value of `name`, or nullopt when it is unset or empty.
std::optional<std::string> lookup_value(const EnvLookup& lookup, const char* name) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// A whole number in [min, max]: no sign other than a leading '-', no spaces, no suffix.
int parse_int(const char* name, const std::string& value, long long min, long long max,
              const char* fix) {
  long long parsed = 0;
  const char* begin = value.data();
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(begin, end, parsed);
  RINGPACK_CHECK(ec != std::errc::result_out_of_range, name, "=", value,
                 " is out of range: expected a number in ", min, "..", max, "; ", fix);
  RINGPACK_CHECK(ec == std::errc() && ptr == end, name, "='", value, "' is not a whole number; ",
                 fix);
  RINGPACK_CHECK(parsed >= 0 || min < 0, name, "=", value, " is negative; ", fix);
  RINGPACK_CHECK(parsed >= min && parsed <= max, name, "=", value,
                 " is out of range: expected a number in ", min, "..", max, "; ", fix);
  return static_cast<int>(parsed);
}

constexpr long long kMaxInt = std::numeric_limits<int>::max();

// Slurm's SLURM_TASKS_PER_NODE ("2(x3),1": three nodes of 2 tasks, then one of 1) expanded to
// one count per node.
std::vector<int> parse_tasks_per_node(const std::string& value) {
  constexpr const char* kName = "SLURM_TASKS_PER_NODE";
  constexpr const char* kFix =
      "srun sets it as counts like 2(x3),1; unset it or fix the job script";
  std::vector<int> counts;
  std::string_view rest(value);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t paren = entry.find('(');
    const int count = parse_int(kName, std::string(entry.substr(0, paren)), 1, kMaxInt, kFix);
    int repeat = 1;
    if (paren != std::string_view::npos) {
      const std::string_view tail = entry.substr(paren);
      RINGPACK_CHECK(tail.size() > 3 && tail.substr(0, 2) == "(x" && tail.back() == ')', kName,
                     "='", value, "' is malformed at '", entry, "'; ", kFix);
      repeat = parse_int(kName, std::string(tail.substr(2, tail.size() - 3)), 1, kMaxInt, kFix);
    }
    RINGPACK_CHECK(counts.size() + size_t(repeat) <= 1'000'000, kName, "='", value,
                   "' lists more nodes than a job can have; ", kFix);
    counts.insert(counts.end(), size_t(repeat), count);
  }
  RINGPACK_CHECK(!counts.empty(), kName, "='", value, "' lists no node; ", kFix);
  return counts;
}

// Processes on this node under Slurm, or nullopt when srun did not say.
std::optional<int> slurm_local_size(const EnvLookup& lookup) {
  const std::optional<std::string> tasks = lookup_value(lookup, "SLURM_TASKS_PER_NODE");
  if (!tasks) return std::nullopt;
  const std::vector<int> counts = parse_tasks_per_node(*tasks);
  const std::optional<std::string> node = lookup_value(lookup, "SLURM_NODEID");
  if (!node) return *std::max_element(counts.begin(), counts.end());
  const int node_id = parse_int("SLURM_NODEID", *node, 0, kMaxInt, kFixLauncher);
  RINGPACK_CHECK(size_t(node_id) < counts.size(), "SLURM_NODEID=", node_id,
                 " names no node of SLURM_TASKS_PER_NODE='", *tasks, "' (", counts.size(),
                 " nodes); ", kFixLauncher);
  return counts[size_t(node_id)];
}

// The rank variables of `vars` when at least one of them is set.
std::optional<LauncherEnv> read_launcher(const EnvLookup& lookup, const LauncherVars& vars) {
  const std::optional<std::string> rank = lookup_value(lookup, vars.rank);
  const std::optional<std::string> size = lookup_value(lookup, vars.size);
  if (!rank && !size) return std::nullopt;
  RINGPACK_CHECK(rank.has_value(), vars.size, "=", *size, " is set but ", vars.rank, " is not: a ",
                 vars.launcher, " launch sets both; set ", vars.rank,
                 " for every process, or unset ", vars.size);
  RINGPACK_CHECK(size.has_value(), vars.rank, "=", *rank, " is set but ", vars.size, " is not: a ",
                 vars.launcher, " launch sets both; set ", vars.size,
                 " for every process, or unset ", vars.rank);

  LauncherEnv env;
  env.launcher = vars.launcher;
  env.world_size = parse_int(vars.size, *size, 1, kMaxInt, kFixLauncher);
  env.rank = parse_int(vars.rank, *rank, 0, kMaxInt, kFixLauncher);
  RINGPACK_CHECK(env.rank < env.world_size, vars.rank, "=", env.rank, " is not below ", vars.size,
                 "=", env.world_size, ": ranks run from 0 to ", vars.size, " - 1; ", kFixLauncher);

  const std::optional<std::string> local_rank = lookup_value(lookup, vars.local_rank);
  std::optional<int> local_size;
  if (vars.local_size != nullptr) {
    if (const auto value = lookup_value(lookup, vars.local_size)) {
      local_size = parse_int(vars.local_size, *value, 1, env.world_size,
                             "it counts the processes of this node, at most the world size");
    }
  } else {
    local_size = slurm_local_size(lookup);
  }
  if (!local_rank) {
    // One node assumed: the launcher did not say which ranks share this one.
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
    return env;
  }
  env.local_world_size = local_size.value_or(env.world_size);
  env.local_rank = parse_int(vars.local_rank, *local_rank, 0, kMaxInt, kFixLauncher);
  RINGPACK_CHECK(env.local_rank < env.local_world_size, vars.local_rank, "=", env.local_rank,
                 " is not below the ", env.local_world_size, " processes of this node; ",
                 kFixLauncher);
  return env;
}

}  // namespace

std::optional<LauncherEnv> read_launcher_env() {
  return read_launcher_env([](const char* name) { return std::getenv(name); });
}

std::optional<LauncherEnv> read_launcher_env(const EnvLookup& lookup) {
  std::optional<LauncherEnv> env;
  for (const LauncherVars& vars : kLaunchers) {
    env = read_launcher(lookup, vars);
    if (env) break;
  }
  if (!env) return std::nullopt;
  if (const auto addr = lookup_value(lookup, "MASTER_ADDR")) env->master_addr = *addr;
  if (const auto port = lookup_value(lookup, "MASTER_PORT")) {
    // The rendezvous listens on MASTER_PORT + 1 (rendezvous.h), which must be a port too.
    env->master_port = parse_int("MASTER_PORT", *port, 1, 65534,
                                 "use a free TCP port in 1..65534, the same on every rank");
  }
  return env;
}

std::string describe(const LauncherEnv& env) {
  return detail::concat("rank ", env.rank, " of ", env.world_size, " (", env.launcher, ")");
}

int launcher_device(const LauncherEnv& env, int device_count) {
  RINGPACK_CHECK(device_count >= 1, describe(env),
                 ": no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES?)");
  return env.local_rank % device_count;
}

}  // namespace ringpack
