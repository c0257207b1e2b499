// `ringpack bench`: times the CUDA forward (direct epilogue) and backward (delta pre-pass + main
// backward) on the standard workloads of docs/design.md §8 and prints one table with the peers
// measured by bench/peers.py on the same layouts (--peers). Timing: CUDA events around each
// repetition after warm-up; median and min/max over the repetitions. FLOPs count visible pairs
// only: forward 4 * head_dim * num_heads_q * pairs, backward 2.5x forward.
//
// Typical use (scripts/gpu_check.sh):  ringpack bench --layouts-only --layouts-out L.json;
//   python3 bench/peers.py --layouts L.json --json P.json;  ringpack bench --peers P.json
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "batch_options.h"
#include "bench_cp.h"
#include "commands.h"
#include "core/excerpt.h"
#include "core/pair_count.h"
#include "core/random.h"
#include "kernel_flags.h"
#include "output_file.h"
#include "ringpack/attention.h"
#include "ringpack/dtype.h"
#include "ringpack/error.h"
#include "ringpack/packing.h"
#include "ringpack/version.h"

#ifdef RINGPACK_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/backward/api.h"
#include "cuda/common/cuda_check.h"
#include "cuda/forward/api.h"
#include "cuda/kernel_options.h"
#endif

namespace ringpack::cli {
namespace {

using nlohmann::json;

constexpr double kBackwardFlopFactor = 2.5;  // docs/design.md §8
constexpr double kFlopsPerPairPerDim = 4.0;  // QK^T and PV: 2 multiply-adds per pair and dim
// Sampled-row check of the forward against fp64: bf16 outputs carry ~2^-8 relative rounding,
// so a correct kernel stays well under 1e-2 relative error over the sampled rows.
constexpr double kSampleTolerance = 1e-2;
constexpr int kSampledRows = 64;

struct BenchCommand {
  std::vector<std::string> workloads = {"dense-16k", "packed-16k", "packed-64k"};
  int num_heads_q = 32;
  int num_heads_kv = 8;
  int head_dim = 128;
  std::string dtype = "bf16";
  int warmup = 5;
  int reps = 30;
  bool backward = true;
  bool layouts_only = false;
  std::string layouts_out;
  std::string peers_file;
  std::string json_file;
  KernelFlags kernels;
  // --cp N: the whole CP schedule over N ranks instead of the kernels alone (bench_cp.h).
  int cp = 0;
  std::string comm;  // empty: device (virtual ranks of one GPU)
  std::string strategy = "ring";
  std::string reorder = "auto";
};

struct Workload {
  std::string name;
  PackedBatch batch;
  int64_t pairs = 0;
  int documents = 0;
};

// "dense-16k": one document of 16384 tokens; "packed-64k": a row of 65536 tokens packed with
// realistic document lengths, seed 0, capped at S/4.
// Largest N of a workload name (N x 1024 tokens: 64M tokens, 512 MiB of ids and positions).
constexpr int kMaxWorkloadKiloTokens = 65536;
constexpr int kTokensPerK = 1024;

// The <N> of "<kind>-<N>k": a whole number from 1 to kMaxWorkloadKiloTokens.
int workload_kilo_tokens(const std::string& name, const std::string& digits) {
  const bool all_digits = !digits.empty() && digits.size() <= 9 &&
                          digits.find_first_not_of("0123456789") == std::string::npos;
  RINGPACK_CHECK(all_digits, "workload '", excerpt(name), "': '", excerpt(digits),
                 "' is not a whole number of thousands of tokens; use e.g. packed-16k");
  const int kilo = std::stoi(digits);
  RINGPACK_CHECK(kilo >= 1 && kilo <= kMaxWorkloadKiloTokens, "workload '", excerpt(name),
                 "': ", kilo, "k tokens is out of range; use 1k to ", kMaxWorkloadKiloTokens, "k");
  return kilo;
}

Workload make_workload(const std::string& name) {
  const size_t dash = name.find('-');
  RINGPACK_CHECK(dash != std::string::npos && name.size() > dash + 1 && name.back() == 'k',
                 "unknown workload '", excerpt(name),
                 "': use dense-<N>k or packed-<N>k, e.g. packed-16k");
  const std::string kind = name.substr(0, dash);
  const int seq_len =
      workload_kilo_tokens(name, name.substr(dash + 1, name.size() - dash - 2)) * kTokensPerK;
  Workload w;
  w.name = name;
  if (kind == "dense") {
    PackerOptions options;
    options.source = LengthSource::kFixed;
    options.fixed_length = seq_len;
    w.batch = pack_documents(1, seq_len, options);
  } else if (kind == "packed") {
    PackerOptions options;
    options.source = LengthSource::kRealistic;
    options.max_doc_length = seq_len / 4;
    options.seed = 0;
    w.batch = pack_documents(1, seq_len, options);
  } else {
    RINGPACK_FAIL("unknown workload kind '", excerpt(kind), "' in '", excerpt(name),
                  "': use dense or packed");
  }
  const std::vector<int> one_rank(seq_len, 0);
  w.pairs = count_step_pairs(w.batch, one_rank, 1, MaskSpec{})[0][0];
  w.documents = count_documents(w.batch)[0];
  return w;
}

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
};

double tflops(double flops, double ms) {
  return ms > 0.0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
}

struct Result {
  std::string workload;
  std::string impl;
  std::string pass = "-";  // "yes" / "NO" / "-" (not checked)
  double check_err = -1.0;
  Timing fwd;
  Timing bwd;
  bool has_bwd = false;
};

json layouts_json(const std::vector<Workload>& workloads, const BenchCommand& c) {
  json out;
  out["num_heads_q"] = c.num_heads_q;
  out["num_heads_kv"] = c.num_heads_kv;
  out["head_dim"] = c.head_dim;
  out["dtype"] = c.dtype;
  out["warmup"] = c.warmup;
  out["reps"] = c.reps;
  for (const Workload& w : workloads) {
    out["workloads"].push_back({{"name", w.name},
                                {"seq_len", w.batch.seq_len},
                                {"pairs", w.pairs},
                                {"documents", w.documents},
                                {"segment_ids", w.batch.segment_ids},
                                {"positions", w.batch.positions}});
  }
  return out;
}

#ifdef RINGPACK_WITH_CUDA

// Inputs uniform in [-1, 1), rounded to dtype.
std::vector<std::byte> random_input(size_t count, DType dtype, uint64_t seed) {
  return to_dtype_bytes(random_uniform(count, seed), dtype);
}

struct DeviceArray {
  explicit DeviceArray(size_t bytes) {
    RINGPACK_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)));
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* ptr = nullptr;
};

template <class T>
std::unique_ptr<DeviceArray> upload(const std::vector<T>& host) {
  auto array = std::make_unique<DeviceArray>(host.size() * sizeof(T));
  RINGPACK_CUDA_CHECK(
      cudaMemcpy(array->ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return array;
}

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Timing t;
  if (ms.empty()) return t;
  t.median_ms =
      ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

// Per-repetition CUDA-event times of fn() after `warmup` untimed calls.
template <class Fn>
Timing time_it(int warmup, int reps, cudaStream_t stream, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<cudaEvent_t> events(2 * size_t(reps));
  for (cudaEvent_t& e : events) RINGPACK_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    RINGPACK_CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
    fn();
    RINGPACK_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
  }
  RINGPACK_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float elapsed = 0.0f;
    RINGPACK_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]));
    ms[i] = elapsed;
  }
  for (cudaEvent_t& e : events) cudaEventDestroy(e);
  return summarize(ms);
}

// Largest relative error (||o - ref|| / ||ref|| per row) of the device O over sampled
// (token, head) rows, against fp64 sums over the visible keys.
double sampled_forward_error(const Workload& w, const BenchCommand& c, DType dtype,
                             const std::vector<std::byte>& q, const std::vector<std::byte>& k,
                             const std::vector<std::byte>& v, const std::vector<std::byte>& out) {
  const int s = w.batch.seq_len;
  const int d = c.head_dim;
  const double scale = resolve_scale(0.0f, d);
  const auto value = [&](const std::vector<std::byte>& bytes, size_t i) {
    return double(load_element(bytes.data(), dtype, i));
  };
  double worst = 0.0;
  uint64_t state = 12345;
  for (int sample = 0; sample < kSampledRows; ++sample) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int token = int((state >> 33) % uint64_t(s));
    const int head = int((state >> 17) % uint64_t(c.num_heads_q));
    const int kv_head = head / (c.num_heads_q / c.num_heads_kv);
    std::vector<double> acc(d, 0.0);
    double max_score = -INFINITY, sum = 0.0;
    std::vector<std::pair<int, double>> scores;
    for (int key = 0; key < s; ++key) {
      if (!visible(w.batch.segment_id(0, token), w.batch.position(0, token),
                   w.batch.segment_id(0, key), w.batch.position(0, key), MaskSpec{}))
        continue;
      double dot = 0.0;
      for (int i = 0; i < d; ++i)
        dot += value(q, (size_t(token) * c.num_heads_q + head) * d + i) *
               value(k, (size_t(key) * c.num_heads_kv + kv_head) * d + i);
      scores.push_back({key, dot * scale});
      max_score = std::max(max_score, dot * scale);
    }
    for (const auto& [key, score] : scores) {
      const double p = std::exp(score - max_score);
      sum += p;
      for (int i = 0; i < d; ++i)
        acc[i] += p * value(v, (size_t(key) * c.num_heads_kv + kv_head) * d + i);
    }
    double err2 = 0.0, ref2 = 0.0;
    for (int i = 0; i < d; ++i) {
      const double ref = scores.empty() ? 0.0 : acc[i] / sum;
      const double got = value(out, (size_t(token) * c.num_heads_q + head) * d + i);
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
    if (!std::isfinite(err2)) return INFINITY;
    worst = std::max(worst, ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2));
  }
  return worst;
}

Result bench_ours(const Workload& w, const BenchCommand& c, DType dtype,
                  const BackendOptions& options) {
  const cuda::KernelOptions kernels = cuda::kernel_options(options);
  int device = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  cuda::check_supported(dtype, c.head_dim, c.backward, kernels, device);
  const int s = w.batch.seq_len;
  AttentionDims dims{1, s, s, c.num_heads_q, c.num_heads_kv, c.head_dim};
  const size_t q_count = size_t(s) * c.num_heads_q * c.head_dim;
  const size_t kv_count = size_t(s) * c.num_heads_kv * c.head_dim;
  const size_t lse_count = size_t(s) * c.num_heads_q;
  const std::vector<std::byte> q = random_input(q_count, dtype, 1);
  const std::vector<std::byte> k = random_input(kv_count, dtype, 2);
  const std::vector<std::byte> v = random_input(kv_count, dtype, 3);
  const std::vector<std::byte> dout = random_input(q_count, dtype, 4);
  auto d_q = upload(q), d_k = upload(k), d_v = upload(v), d_dout = upload(dout);
  auto d_seg = upload(w.batch.segment_ids), d_pos = upload(w.batch.positions);
  DeviceArray d_out(q_count * 2), d_lse(lse_count * 4), d_delta(lse_count * 4);
  DeviceArray d_dq(q_count * 4), d_dk(kv_count * 4), d_dv(kv_count * 4);
  // Inputs (>= 128 MiB for Q at 16k tokens) exceed the 50 MiB L2, so no rotation is needed.
  cudaStream_t stream = nullptr;
  RINGPACK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  AttentionStep step;
  step.dims = dims;
  step.dtype = dtype;
  step.q = d_q->ptr;
  step.k = d_k->ptr;
  step.v = d_v->ptr;
  step.segment_ids_q = step.segment_ids_k = static_cast<const int32_t*>(d_seg->ptr);
  step.positions_q = step.positions_k = static_cast<const int32_t*>(d_pos->ptr);

  Result r;
  r.workload = w.name;
  r.impl = "ringpack";
  r.fwd = time_it(c.warmup, c.reps, stream, [&] {
    cuda::run_forward_direct(step, d_out.ptr, static_cast<float*>(d_lse.ptr), kernels, stream);
  });
  std::vector<std::byte> out(q_count * 2);
  RINGPACK_CUDA_CHECK(cudaStreamSynchronize(stream));
  RINGPACK_CUDA_CHECK(cudaMemcpy(out.data(), d_out.ptr, q_count * 2, cudaMemcpyDeviceToHost));
  r.check_err = sampled_forward_error(w, c, dtype, q, k, v, out);
  r.pass = r.check_err <= kSampleTolerance ? "yes" : "NO";

  if (c.backward) {
    RINGPACK_CUDA_CHECK(cudaMemsetAsync(d_dq.ptr, 0, q_count * 4, stream));
    RINGPACK_CUDA_CHECK(cudaMemsetAsync(d_dk.ptr, 0, kv_count * 4, stream));
    RINGPACK_CUDA_CHECK(cudaMemsetAsync(d_dv.ptr, 0, kv_count * 4, stream));
    BackwardInputs in{d_dout->ptr, static_cast<const float*>(d_lse.ptr),
                      static_cast<const float*>(d_delta.ptr)};
    BackwardAccumulators acc{static_cast<float*>(d_dq.ptr), static_cast<float*>(d_dk.ptr),
                             static_cast<float*>(d_dv.ptr)};
    r.bwd = time_it(c.warmup, c.reps, stream, [&] {
      cuda::run_delta(d_dout->ptr, d_out.ptr, dtype, dims, static_cast<float*>(d_delta.ptr),
                      stream);
      cuda::run_backward(step, in, acc, kernels, stream);
    });
    r.has_bwd = true;
  }
  RINGPACK_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaStreamDestroy(stream);
  return r;
}

std::string device_name() {
  cudaDeviceProp prop{};
  int device = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  RINGPACK_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

#else

Result bench_ours(const Workload&, const BenchCommand&, DType, const BackendOptions&) {
  RINGPACK_FAIL("ringpack was built without CUDA; rebuild with -DRINGPACK_CUDA=ON to benchmark");
}

std::string device_name() {
  return "none";
}

#endif  // RINGPACK_WITH_CUDA

std::vector<Result> load_peers(const std::string& path, std::string& peer_device) {
  std::ifstream in(path);
  RINGPACK_CHECK(in.good(), "cannot read peers file '", path, "'; run bench/peers.py first");
  const json j = json::parse(in);
  peer_device = j.value("device", "");
  std::vector<Result> results;
  for (const json& e : j.at("results")) {
    Result r;
    r.workload = e.at("workload").get<std::string>();
    r.impl = e.at("impl").get<std::string>();
    r.fwd = {e.at("fwd_ms").get<double>(), e.value("fwd_ms_min", 0.0), e.value("fwd_ms_max", 0.0)};
    if (e.contains("bwd_ms") && !e.at("bwd_ms").is_null()) {
      r.bwd = {e.at("bwd_ms").get<double>(), e.value("bwd_ms_min", 0.0),
               e.value("bwd_ms_max", 0.0)};
      r.has_bwd = true;
    }
    if (e.contains("error") && !e.at("error").is_null()) r.pass = "ERR";
    results.push_back(r);
  }
  return results;
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

void run_cp(const BenchCommand& c, const std::vector<Workload>& workloads,
            const BackendOptions& kernels) {
  CpBenchSetup setup;
  setup.run.backend = BackendKind::kCuda;
  setup.run.backend_options = kernels;
  setup.run.comm = c.comm.empty() ? CommKind::kDevice : parse_comm_kind(c.comm);
  BatchOptions& o = setup.run.batch;
  o.cp = c.cp;
  o.num_heads_q = c.num_heads_q;
  o.num_heads_kv = c.num_heads_kv;
  o.head_dim = c.head_dim;
  o.dtype = parse_dtype(c.dtype);
  o.strategy = parse_strategy(c.strategy);
  o.reorder = parse_reorder_label(c.reorder);
  setup.reps = c.reps;
  setup.warmup = c.warmup;
  std::vector<std::pair<std::string, PackedBatch>> batches;
  for (const Workload& w : workloads) batches.emplace_back(w.name, w.batch);
  print_cp_bench(batches, setup, source_commit());
}

void run(const BenchCommand& c) {
  RINGPACK_CHECK(!c.layouts_only || !c.layouts_out.empty(),
                 "--layouts-only writes the layouts to --layouts-out, which is missing: pass "
                 "--layouts-out FILE");
  const DType dtype = parse_dtype(c.dtype);
  BackendOptions kernels;  // the CUDA kernel choices of the flags; other fields keep defaults
  c.kernels.apply(kernels);
  std::vector<Workload> workloads;
  for (const std::string& name : c.workloads) workloads.push_back(make_workload(name));
  if (c.cp > 0) return run_cp(c, workloads, kernels);
  if (!c.layouts_out.empty()) write_output(layouts_json(workloads, c).dump() + "\n", c.layouts_out);
  if (c.layouts_only) return;

  std::vector<Result> results;
  for (const Workload& w : workloads) {
    std::cerr << "[ringpack] bench " << w.name << " (" << w.documents << " documents, " << w.pairs
              << " visible pairs)" << std::endl;
    results.push_back(bench_ours(w, c, dtype, kernels));
  }
  std::string peer_device;
  std::vector<Result> peers;
  if (!c.peers_file.empty()) peers = load_peers(c.peers_file, peer_device);
  std::vector<std::string> peer_names;
  for (const Result& p : peers)
    if (std::find(peer_names.begin(), peer_names.end(), p.impl) == peer_names.end())
      peer_names.push_back(p.impl);

  std::map<std::string, const Workload*> by_name;
  for (const Workload& w : workloads) by_name[w.name] = &w;
  const auto flops = [&](const std::string& name) {
    const Workload* w = by_name.at(name);
    return kFlopsPerPairPerDim * c.head_dim * c.num_heads_q * double(w->pairs);
  };

  // The table.
  std::ostringstream table;
  table << "# ringpack bench: device " << device_name() << ", dtype " << c.dtype << ", batch 1, "
        << c.num_heads_q << " q heads, " << c.num_heads_kv << " kv heads, head_dim " << c.head_dim
        << ", causal document mask\n"
        << "# commit " << source_commit() << "; CUDA events, " << c.warmup << " warm-up + "
        << c.reps << " reps, median ms (min-max)\n"
        << "# kernels: " << c.kernels.describe() << "\n"
        << "# TFLOP/s = 4 * head_dim * num_heads_q * visible_pairs / time (fwd); bwd 2.5x fwd\n"
        << "# ours: fwd = tile pre-pass + kernel (direct epilogue); bwd = delta + backward;"
        << " pass = sampled rows vs fp64 (rel err <= " << kSampleTolerance << ")\n";
  if (!peer_device.empty()) table << "# peers (bench/peers.py) on " << peer_device << "\n";
  for (const Workload& w : workloads)
    table << "# " << w.name << ": " << w.batch.seq_len << " tokens, " << w.documents
          << " documents, " << w.pairs << " visible pairs\n";
  table << std::left << std::setw(12) << "workload" << std::setw(10) << "impl" << std::setw(6)
        << "pass" << std::right << std::setw(25) << "fwd ms" << std::setw(9) << "fwd TF/s"
        << std::setw(25) << "bwd ms" << std::setw(9) << "bwd TF/s";
  for (const std::string& p : peer_names) table << std::setw(16) << ("vs " + p + " f/b");
  table << "\n";
  std::vector<Result> all = results;
  all.insert(all.end(), peers.begin(), peers.end());
  std::stable_sort(all.begin(), all.end(), [&](const Result& a, const Result& b) {
    const auto index = [&](const std::string& n) {
      return std::find(c.workloads.begin(), c.workloads.end(), n) - c.workloads.begin();
    };
    return index(a.workload) < index(b.workload);
  });
  json json_results = json::array();
  for (const Result& r : all) {
    if (!by_name.count(r.workload)) continue;
    const double f = flops(r.workload);
    const auto span = [&](const Timing& t) {
      return fixed(t.median_ms, 3) + " (" + fixed(t.min_ms, 3) + "-" + fixed(t.max_ms, 3) + ")";
    };
    table << std::left << std::setw(12) << r.workload << std::setw(10) << r.impl << std::setw(6)
          << r.pass << std::right << std::setw(25) << span(r.fwd) << std::setw(9)
          << fixed(tflops(f, r.fwd.median_ms), 1) << std::setw(25)
          << (r.has_bwd ? span(r.bwd) : "-") << std::setw(9)
          << (r.has_bwd ? fixed(tflops(kBackwardFlopFactor * f, r.bwd.median_ms), 1) : "-");
    json entry = {{"workload", r.workload},
                  {"impl", r.impl},
                  {"pass", r.pass},
                  {"fwd_ms", r.fwd.median_ms},
                  {"fwd_ms_min", r.fwd.min_ms},
                  {"fwd_ms_max", r.fwd.max_ms},
                  {"fwd_tflops", tflops(f, r.fwd.median_ms)}};
    if (r.check_err >= 0.0) entry["sampled_rel_err"] = r.check_err;
    if (r.has_bwd) {
      entry["bwd_ms"] = r.bwd.median_ms;
      entry["bwd_ms_min"] = r.bwd.min_ms;
      entry["bwd_ms_max"] = r.bwd.max_ms;
      entry["bwd_tflops"] = tflops(kBackwardFlopFactor * f, r.bwd.median_ms);
    }
    for (const std::string& p : peer_names) {
      const auto peer = std::find_if(peers.begin(), peers.end(), [&](const Result& x) {
        return x.impl == p && x.workload == r.workload;
      });
      std::string cell = "-";
      if (r.impl == "ringpack" && peer != peers.end() && peer->fwd.median_ms > 0.0) {
        const double fwd_ratio = peer->fwd.median_ms / r.fwd.median_ms;
        cell = fixed(fwd_ratio, 2);
        entry["fwd_ratio_vs_" + p] = fwd_ratio;
        if (r.has_bwd && peer->has_bwd && r.bwd.median_ms > 0.0) {
          const double bwd_ratio = peer->bwd.median_ms / r.bwd.median_ms;
          cell += "/" + fixed(bwd_ratio, 2);
          entry["bwd_ratio_vs_" + p] = bwd_ratio;
        }
      }
      table << std::setw(16) << cell;
    }
    table << "\n";
    json_results.push_back(entry);
  }
  std::cout << table.str() << std::flush;
  if (!c.json_file.empty()) {
    json out = layouts_json({}, c);
    out.erase("workloads");
    out["device"] = device_name();
    out["commit"] = source_commit();
    out["kernels"] = c.kernels.describe();
    out["formula"] = "fwd TFLOP/s = 4*head_dim*num_heads_q*pairs/time; bwd = 2.5x";
    out["results"] = json_results;
    std::ofstream file(c.json_file);
    RINGPACK_CHECK(file.good(), "cannot write '", c.json_file, "'; check the directory");
    file << out.dump(2) << "\n";
  }
  for (const Result& r : results)
    if (r.pass == "NO") throw CLI::RuntimeError(kExitFail);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "bench", "time the CUDA forward and backward on the standard workloads (docs/design.md §8)");
  auto state = std::make_shared<BenchCommand>();
  command->formatter(std::make_shared<HelpFormatter>());
  command->add_option("--workloads", state->workloads, "dense-<N>k / packed-<N>k names")
      ->delimiter(',');
  command->add_option("--heads-q", state->num_heads_q, "query heads");
  command->add_option("--heads-kv", state->num_heads_kv, "key/value heads");
  command->add_option("--head-dim", state->head_dim, "head_dim (64, 128, 256)");
  command->add_option("--dtype", state->dtype, "bf16 or fp16");
  command->add_option("--warmup", state->warmup, "untimed calls before timing");
  command->add_option("--reps", state->reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, 100000));
  command->add_flag("!--no-backward", state->backward, "time the forward only");
  command->add_flag("--layouts-only", state->layouts_only,
                    "write --layouts-out and exit (for bench/peers.py)");
  command->add_option("--layouts-out", state->layouts_out,
                      "write the workload layouts (segment ids, positions) as JSON");
  command->add_option("--peers", state->peers_file, "peer timings from bench/peers.py (JSON)");
  command->add_option("--json", state->json_file, "also write the results as JSON");
  const std::string cp_group = "CP (with --cp)";
  command
      ->add_option("--cp", state->cp,
                   "time the whole CP forward and backward over this many ranks, against one "
                   "rank on the whole row (0: the kernels alone)")
      ->group(cp_group);
  command->add_option("--comm", state->comm, "device (default), nccl")->group(cp_group);
  command->add_option("--strategy", state->strategy, "ring or all_gather")->group(cp_group);
  command->add_option("--reorder", state->reorder, "auto, contiguous, dual_chunk_swap, striped")
      ->group(cp_group);
  state->kernels.add_to(*command, "CUDA kernels", nullptr);
  command->callback([state] { run(*state); });
}

}  // namespace ringpack::cli
