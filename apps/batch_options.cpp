// Shared batch options and the YAML config (see batch_options.h for the keys and precedence).
#include "batch_options.h"

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "core/excerpt.h"
#include "ringpack/error.h"

namespace ringpack::cli {
namespace {

// "--seq-len" -> "seq_len": the config key of a long flag.
std::string config_key(std::string_view flag) {
  while (!flag.empty() && flag.front() == '-') flag.remove_prefix(1);
  std::string key(flag);
  for (char& c : key) {
    if (c == '-') c = '_';
  }
  return key;
}

template <class T>
const char* expected_kind() {
  if constexpr (std::is_same_v<T, bool>) {
    return "true or false";
  } else if constexpr (std::is_integral_v<T>) {
    return "an integer";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "a string";
  } else {
    return "a list of integers";
  }
}

std::string describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + excerpt(node.Scalar()) + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

// Levenshtein distance between two key names (for the "did you mean" of unknown keys).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

// A path from the config file: relative paths are relative to the config file's folder.
ConfigKeys::Setter store_path(std::string& field, const std::string& key) {
  return [&field, key](const YAML::Node& node, const std::filesystem::path& config_dir) {
    const std::filesystem::path path = yaml_value<std::string>(node, key);
    field = path.is_absolute() ? path.string() : (config_dir / path).string();
  };
}

}  // namespace

// ---- help layout ----------------------------------------------------------------------------

std::string HelpFormatter::make_option_name(const CLI::Option* option, bool positional) const {
  if (positional) return Formatter::make_option_name(option, positional);
  std::string names;  // the names alone, without CLI11's "{value}" after a negated flag
  for (const std::string& name : option->get_snames()) names += (names.empty() ? "-" : ",-") + name;
  for (const std::string& name : option->get_lnames()) {
    names += (names.empty() ? "--" : ",--") + name;
  }
  return names.empty() ? Formatter::make_option_name(option, positional) : names;
}

std::string HelpFormatter::make_option_opts(const CLI::Option* option) const {
  std::string text = Formatter::make_option_opts(option);
  const std::string value = option->get_default_str();
  // Flags and options with their own text (add_toggle) are left as they are.
  if (option->get_type_size() == 0 || value.empty() || !option->get_option_text().empty()) {
    return text;
  }
  // CLI11 writes "TYPE=value"; a list default is already bracketed, an empty list shows nothing.
  const std::string inline_default = "=" + value;
  const size_t at = text.find(inline_default);
  if (at == std::string::npos) return text;
  std::string shown;
  if (value != "[]") shown = value.front() == '[' ? " " + value : " [" + value + "]";
  return text.replace(at, inline_default.size(), shown);
}

CLI::Option* add_toggle(CLI::App& command, const std::string& flag_names, bool& field,
                        const std::string& help) {
  const size_t comma = flag_names.find(",!");
  RINGPACK_CHECK(comma != std::string::npos, "internal: toggle '", flag_names,
                 "' is not of the form --name,!--no-name");
  const std::string on = flag_names.substr(0, comma);
  const std::string off = flag_names.substr(comma + 2);
  return command.add_flag(flag_names, field, help)->option_text("[" + (field ? on : off) + "]");
}

template <class T>
T yaml_value(const YAML::Node& node, const std::string& key) {
  try {
    if (node.IsScalar() || node.IsSequence()) return node.as<T>();
  } catch (const YAML::Exception&) {
    // Reported below with the key and the value.
  }
  RINGPACK_FAIL("key '", key, "' expects ", expected_kind<T>(), ", got ", describe(node));
}

template int yaml_value<int>(const YAML::Node&, const std::string&);
template int64_t yaml_value<int64_t>(const YAML::Node&, const std::string&);
template uint64_t yaml_value<uint64_t>(const YAML::Node&, const std::string&);
template bool yaml_value<bool>(const YAML::Node&, const std::string&);
template double yaml_value<double>(const YAML::Node&, const std::string&);
template std::string yaml_value<std::string>(const YAML::Node&, const std::string&);
template std::vector<int32_t> yaml_value<std::vector<int32_t>>(const YAML::Node&,
                                                               const std::string&);

// ---- ConfigKeys -----------------------------------------------------------------------------

void ConfigKeys::add(std::string key, const CLI::Option* option, Setter set) {
  keys_.push_back({std::move(key), option, std::move(set)});
}

void ConfigKeys::add_ignored(std::string key) {
  keys_.push_back({std::move(key), nullptr, {}});
}

bool ConfigKeys::known(const std::string& name) const {
  for (const Key& key : keys_) {
    if (key.name == name) return true;
  }
  return false;
}

std::string ConfigKeys::closest_name(const std::string& name) const {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const Key& key : keys_) {
    const size_t distance = edit_distance(name, key.name);
    if (distance < best_distance) {
      best_distance = distance;
      best = key.name;
    }
  }
  return best;
}

YAML::Node ConfigKeys::load(const std::string& path) {
  std::error_code ignored;
  RINGPACK_CHECK(!std::filesystem::is_directory(path, ignored), "config file '", path,
                 "' is a directory: give --config the path of a YAML file");
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    RINGPACK_FAIL("cannot read config file '", path, "': check the path given to --config");
  } catch (const YAML::Exception& e) {
    RINGPACK_FAIL("config file '", path,
                  "' is not valid YAML: ", excerpt(e.what(), 2 * kExcerptChars));
  }
}

void ConfigKeys::check_names(const YAML::Node& root, const std::string& path) const {
  std::set<std::string> seen;
  for (const auto& entry : root) {
    RINGPACK_CHECK(entry.first.IsScalar(), "config file '", path, "': a key is ",
                   describe(entry.first), "; keys are names such as seq_len");
    const std::string name = entry.first.Scalar();
    RINGPACK_CHECK(known(name), "unknown key '", excerpt(name), "' in config file '", path,
                   "': did you mean '", closest_name(name),
                   "'? (config keys are the long flags of --help, with '_' for '-')");
    RINGPACK_CHECK(seen.insert(name).second, "key '", excerpt(name),
                   "' appears twice in config file '", path, "': give each key once");
  }
}

void ConfigKeys::apply_file(const std::string& path) const {
  const YAML::Node root = load(path);
  if (root.IsNull()) return;  // an empty file sets nothing
  RINGPACK_CHECK(root.IsMap(), "config file '", path,
                 "' must be a mapping of 'key: value' lines, got ", describe(root));
  check_names(root, path);

  const YAML::Node& entries = root;  // const: lookups must not insert keys
  const std::filesystem::path config_dir = std::filesystem::path(path).parent_path();
  for (const Key& key : keys_) {
    const YAML::Node value = entries[key.name];
    if (!value || !key.set) continue;
    if (key.option != nullptr && key.option->count() > 0) continue;  // the flag wins
    try {
      key.set(value, config_dir);
    } catch (const Error& e) {
      throw Error("config file '" + path + "': " + e.what(), e.where());
    }
  }
}

// ---- BatchFlags -----------------------------------------------------------------------------

BatchFlags::BatchFlags() {
  const BatchOptions defaults;
  seq_len_ = defaults.seq_len;
  batch_ = defaults.batch;
  cp_ = defaults.cp;
  reorder_ = reorder_kind_name(defaults.reorder.kind);
  stripe_size_ = defaults.reorder.stripe_size;
  strategy_ = strategy_name(defaults.strategy);
  packing_ = defaults.packer.packing;
  lengths_ = length_source_name(defaults.packer.source);
  lengths_file_ = defaults.packer.lengths_file;
  doc_length_ = defaults.packer.fixed_length;
  uniform_min_ = defaults.packer.uniform_min;
  uniform_max_ = defaults.packer.uniform_max;
  max_doc_length_ = defaults.packer.max_doc_length;
  heads_q_ = defaults.num_heads_q;
  heads_kv_ = defaults.num_heads_kv;
  head_dim_ = defaults.head_dim;
  dtype_ = dtype_name(defaults.dtype);
  seed_ = defaults.seed;
  causal_ = defaults.mask.causal;
  window_ = defaults.mask.window;
}

void BatchFlags::add_to(CLI::App& command, ConfigKeys& keys) {
  command.formatter(std::make_shared<HelpFormatter>());
  // Registers `--flag` bound to `field`, and its config key.
  const auto option = [&](const std::string& flag, auto& field, const std::string& help,
                          const std::string& group) {
    CLI::Option* added = command.add_option(flag, field, help)->group(group);
    keys.add(config_key(flag), added, store_into(field, config_key(flag)));
    return added;
  };
  // A --name / --no-name pair (flag_names: "--name,!--no-name").
  const auto toggle = [&](const std::string& flag_names, const std::string& key, bool& field,
                          const std::string& help, const std::string& group) {
    CLI::Option* added = add_toggle(command, flag_names, field, help)->group(group);
    keys.add(key, added, store_into(field, key));
    return added;
  };

  const std::string shape = "Batch";
  seq_len_option_ = option("--seq-len", seq_len_, "tokens per row (S)", shape);
  batch_option_ = option("--batch", batch_, "rows per batch (B)", shape);
  option("--cp", cp_, "context-parallel ranks", shape);
  toggle("--packing,!--no-packing", "packing", packing_,
         "pack several documents per row (off: one document per row, rest padding)", shape);
  option("--lengths", lengths_, "document lengths: realistic|file|fixed|uniform", shape);
  CLI::Option* lengths_file =
      command.add_option("--lengths-file", lengths_file_, "lengths file (--lengths file)")
          ->group(shape);
  keys.add("lengths_file", lengths_file, store_path(lengths_file_, "lengths_file"));
  option("--doc-length", doc_length_, "document length for --lengths fixed", shape);
  option("--uniform-min", uniform_min_, "shortest document for --lengths uniform", shape);
  option("--uniform-max", uniform_max_, "longest document for --lengths uniform", shape);
  option("--max-doc-length", max_doc_length_,
         "cap on sampled lengths (-1 = a quarter of the row, 0 = none)", shape);
  CLI::Option* layout =
      command
          .add_option("--layout", layout_file_,
                      "JSON layout {\"segment_ids\": [[...]], \"positions\": [[...]]}; replaces "
                      "the packer, batch and seq_len come from the file")
          ->group(shape);
  keys.add("layout", layout, store_path(layout_file_, "layout"));
  CLI::Option* segment_ids =
      option("--segment-ids", segment_ids_,
             "one row given inline, e.g. 1,1,2,2,0 (positions derived; replaces the packer)", shape)
          ->delimiter(',');
  segment_ids->excludes(layout);
  option("--seed", seed_, "seed of the packer and of the random inputs", shape);

  const std::string cp = "Context parallelism";
  reorder_option_ =
      option("--reorder", reorder_, "auto|contiguous|dual_chunk_swap|striped (or striped:SS)", cp);
  option("--stripe-size", stripe_size_, "stripe size of the striped reorder", cp);
  option("--strategy", strategy_, "ring|all_gather", cp);

  const std::string attention = "Attention";
  option("--heads-q", heads_q_, "query heads", attention);
  option("--heads-kv", heads_kv_, "key/value heads (divides --heads-q)", attention);
  option("--head-dim", head_dim_, "per-head width", attention);
  option("--dtype", dtype_, "fp32|bf16|fp16", attention);
  toggle("--causal,!--non-causal", "causal", causal_, "causal mask within each document",
         attention);
  option("--window", window_, "sliding window: pos_q - pos_k <= N (-1 = none)", attention);

  // Aliases and the seed system's names; after the keys they alias so their rules apply last.
  keys.add("num_heads_q", command.get_option("--heads-q"), store_into(heads_q_, "num_heads_q"));
  keys.add("num_heads_kv", command.get_option("--heads-kv"), store_into(heads_kv_, "num_heads_kv"));
  keys.add("context_parallel_strategy", command.get_option("--strategy"),
           store_into(strategy_, "context_parallel_strategy"));
  keys.add("context_parallel_reorder_strategy", reorder_option_,
           store_into(reorder_, "context_parallel_reorder_strategy"));
  // --reorder on the command line wins over it, as over every key of the file.
  keys.add("context_parallel_load_balance", reorder_option_,
           [this](const YAML::Node& node, const std::filesystem::path&) {
             apply_load_balance(yaml_value<bool>(node, "context_parallel_load_balance"));
           });

  const std::string io = "Input and output";
  command.add_option("--config", config_file_, "YAML config; flags given here override it")
      ->group(io);
  command.add_flag("--json", output_.json, "print JSON instead of text")->group(io);
  command
      .add_option(
          "--output", output_.output_file,
          "write the result to FILE instead of stdout (atomically: a temporary file in FILE's "
          "folder, renamed over FILE; a link at FILE is kept and its target replaced)")
      ->group(io);
}

void BatchFlags::apply_load_balance(bool load_balance) {
  const std::string contiguous = reorder_kind_name(ReorderKind::kContiguous);
  const std::string kind = reorder_.substr(0, reorder_.find(':'));
  if (kind == reorder_kind_name(ReorderKind::kAuto)) {
    // auto picks among the balanced reorders (docs/design.md §3); no balance: no reorder.
    if (!load_balance) reorder_ = contiguous;
    return;
  }
  RINGPACK_CHECK(load_balance != (kind == contiguous),
                 "context_parallel_load_balance: ", load_balance ? "true" : "false",
                 " conflicts with reorder '", excerpt(reorder_), "': ",
                 load_balance ? "contiguous does not balance the load; drop one of the two"
                              : "no load balance means the contiguous order; drop one of the two");
}

BatchOptions BatchFlags::resolve(const ConfigKeys& keys) {
  if (!config_file_.empty()) keys.apply_file(config_file_);
  return to_options();
}

BatchOptions BatchFlags::to_options() const {
  BatchOptions options;
  options.batch = batch_;
  options.seq_len = seq_len_;
  options.cp = cp_;

  options.packer.packing = packing_;
  options.packer.source = parse_length_source(lengths_);
  options.packer.lengths_file = lengths_file_;
  options.packer.fixed_length = doc_length_;
  options.packer.uniform_min = uniform_min_;
  options.packer.uniform_max = uniform_max_;
  options.packer.max_doc_length = max_doc_length_;
  options.packer.seed = seed_;
  options.layout_file = layout_file_;

  if (!segment_ids_.empty()) {
    RINGPACK_CHECK(layout_file_.empty(),
                   "--segment-ids and --layout both describe the batch: give only one of them");
    const int tokens = int(segment_ids_.size());
    RINGPACK_CHECK(seq_len_option_->count() == 0 || seq_len_ == tokens, "--seq-len ", seq_len_,
                   " does not match the ", tokens, " tokens of --segment-ids: drop --seq-len");
    RINGPACK_CHECK(batch_option_->count() == 0 || batch_ == 1, "--batch ", batch_,
                   " with --segment-ids: --segment-ids gives one row; use --layout for more");
    PackedBatch layout;
    layout.batch = 1;
    layout.seq_len = tokens;
    layout.segment_ids = segment_ids_;
    layout.positions = derive_positions(segment_ids_, layout.batch, layout.seq_len);
    options.batch = layout.batch;
    options.seq_len = layout.seq_len;
    options.layout = std::move(layout);
  }

  RINGPACK_CHECK(stripe_size_ >= 1, "--stripe-size ", stripe_size_,
                 " is not a stripe size: give 1 or more tokens per stripe");
  if (reorder_.find(':') == std::string::npos) {
    options.reorder.kind = parse_reorder_kind(reorder_);
    options.reorder.stripe_size = stripe_size_;
  } else {
    options.reorder = parse_reorder_label(reorder_);  // "striped:SS" carries its own size
  }
  options.strategy = parse_strategy(strategy_);

  options.mask.causal = causal_;
  RINGPACK_CHECK(window_ >= -1, "--window ", window_,
                 " is not a window: pass -1 (or leave it out) for none, or 0 or more tokens");
  options.mask.window = window_;
  options.num_heads_q = heads_q_;
  options.num_heads_kv = heads_kv_;
  options.head_dim = head_dim_;
  options.dtype = parse_dtype(dtype_);
  options.seed = seed_;
  return options;
}

}  // namespace ringpack::cli
