// The options shared by `ringpack run`, `plan` and `layout` (one batch and its CP
// configuration), the output options, and the YAML config file that can supply them.
//
// Precedence: a flag given on the command line wins over the config file, which wins over the
// defaults of ringpack::BatchOptions (include/ringpack/job.h). The config keys are the long flag
// names with '_' for '-' (seq_len, heads_q, ...), plus aliases num_heads_q / num_heads_kv and the
// seed system's names:
//   context_parallel_strategy          all_gather | ring                -> strategy
//   context_parallel_reorder_strategy  auto | dual_chunk_swap | striped -> reorder
//   context_parallel_load_balance      bool (default true: auto picks a balanced reorder);
//                                      false -> reorder contiguous; a reorder key of the file
//                                      that contradicts it is an error, never overridden (a
//                                      --reorder flag wins over both, like every flag)
//   packing                            bool
// Keys are applied in the order they are registered (not file order), so the load-balance rule
// holds wherever the keys appear. Relative file paths in the config (layout, lengths_file) are
// resolved against the config file's folder. Keys of `run` only (backend, threads, verify,
// backward, deterministic, the CUDA kernel keys of kernel_flags.h, ...: kRunOnlyConfigKeys) are
// accepted and ignored by plan and layout, so one file serves all.
#pragma once

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ringpack/job.h"

namespace ringpack::cli {

// Config keys of `run` only; plan and layout accept and ignore them (apart from backend, which
// picks the cost model's rates there).
inline constexpr const char* kRunOnlyConfigKeys[] = {"backend",
                                                     "threads",
                                                     "verify",
                                                     "backward",
                                                     "deterministic",
                                                     "comm",
                                                     "comm_timeout",
                                                     "forward_loop",
                                                     "backward_loop",
                                                     "backward_grad_add",
                                                     "backward_head_splits",
                                                     "forward_schedule",
                                                     "backward_schedule",
                                                     "forward_overlap",
                                                     "sm_margin"};

// Where and how a command writes its result.
struct OutputOptions {
  bool json = false;
  std::string output_file;  // empty: stdout
};

// Config keys -> the command-line option each stands for and how to set it from YAML.
class ConfigKeys {
 public:
  // Sets the option's value from a YAML node; config_dir resolves relative paths.
  using Setter =
      std::function<void(const YAML::Node& value, const std::filesystem::path& config_dir)>;

  // `option` may be null for keys that no flag mirrors; such keys always apply.
  void add(std::string key, const CLI::Option* option, Setter set);
  // A key that is accepted and ignored (keys of other commands).
  void add_ignored(std::string key);

  // Reads the YAML mapping at `path` and applies each known key whose option was not given on
  // the command line. Throws ringpack::Error on unreadable files, unknown or repeated keys
  // (naming the key and the closest accepted one) and values of the wrong type.
  void apply_file(const std::string& path) const;

 private:
  struct Key {
    std::string name;
    const CLI::Option* option = nullptr;
    Setter set;  // empty: ignored key
  };
  static YAML::Node load(const std::string& path);
  // Every key of the file is known and given once; throws ringpack::Error naming the key.
  void check_names(const YAML::Node& root, const std::string& path) const;
  bool known(const std::string& name) const;
  std::string closest_name(const std::string& name) const;
  std::vector<Key> keys_;
};

// YAML scalar -> T, or ringpack::Error naming the key, the expected type and the value.
template <class T>
T yaml_value(const YAML::Node& node, const std::string& key);

// Setter that stores the YAML value of `key` into `field`.
template <class T>
ConfigKeys::Setter store_into(T& field, const std::string& key) {
  return [&field, key](const YAML::Node& node, const std::filesystem::path&) {
    field = yaml_value<T>(node, key);
  };
}

// The help layout of ringpack's commands. An option shows its default in brackets after its type
// ("--seq-len INT [4096]"), and a --name / --no-name pair shows the flag in effect when neither is
// given ("--packing,--no-packing [--packing]", see add_toggle). CLI11's own layout prints such a
// pair as "--packing,--no-packing{false}" (the value that --no-packing stores), which reads as if
// the default were off.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* option, bool positional) const override;
  std::string make_option_opts(const CLI::Option* option) const override;
};

// Adds the pair `flag_names` = "--name,!--no-name" bound to `field`; its help names the flag that
// gives field's current value (the default), e.g. "[--name]".
CLI::Option* add_toggle(CLI::App& command, const std::string& flag_names, bool& field,
                        const std::string& help);

// The shared options of run, plan and layout, as given on the command line or in the config.
// add_to also gives the command the HelpFormatter.
class BatchFlags {
 public:
  BatchFlags();

  // Registers the options on `command` and their config keys in `keys`.
  void add_to(CLI::App& command, ConfigKeys& keys);

  // Applies the config file (if --config was given), then converts to BatchOptions.
  // Throws ringpack::Error naming the value and the fix on bad input.
  BatchOptions resolve(const ConfigKeys& keys);

  const OutputOptions& output() const { return output_; }

 private:
  BatchOptions to_options() const;
  // context_parallel_load_balance: false turns auto into contiguous; with an explicit reorder
  // that contradicts it (a balanced one with false, contiguous with true) it is an error.
  void apply_load_balance(bool load_balance);

  int seq_len_;
  int batch_;
  int cp_;
  std::string reorder_;
  int stripe_size_;
  std::string strategy_;
  bool packing_;
  std::string lengths_;
  std::string lengths_file_;
  int doc_length_;
  int uniform_min_;
  int uniform_max_;
  int max_doc_length_;
  std::string layout_file_;
  std::vector<int32_t> segment_ids_;
  int heads_q_;
  int heads_kv_;
  int head_dim_;
  std::string dtype_;
  uint64_t seed_;
  bool causal_;
  int64_t window_;
  std::string config_file_;
  OutputOptions output_;

  const CLI::Option* seq_len_option_ = nullptr;
  const CLI::Option* batch_option_ = nullptr;
  const CLI::Option* reorder_option_ = nullptr;
};

}  // namespace ringpack::cli
