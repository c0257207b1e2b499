// Exchanges between the processes of a multi-process run (rank_exchange.h).
#include "job/rank_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "cp/device_buffer.h"
#include "cp/step_recorder.h"
#include "ringpack/error.h"
#include "ringpack/reorder.h"

namespace ringpack {
namespace {

// [size][bytes]: every rank's `bytes` bytes at `data`.
std::vector<std::byte> all_gather_fixed(AttentionBackend& backend, Communicator& comm,
                                        const void* data, size_t bytes) {
  std::vector<std::byte> gathered(size_t(comm.size()) * bytes);
  if (bytes == 0) return gathered;
  DeviceBuffer send(backend, bytes);
  DeviceBuffer recv(backend, gathered.size());
  backend.copy_from_host(send.data(), data, bytes);
  comm.all_gather(send.data(), recv.data(), bytes);
  wait_idle(backend, comm, "gathering the ranks' results");
  backend.copy_to_host(gathered.data(), recv.data(), gathered.size());
  return gathered;
}

// Plain-old-data and byte blobs in one buffer, read back in the same order.
class ByteWriter {
 public:
  template <class T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&value, sizeof(T));
  }
  void put_blob(const void* data, size_t bytes) {
    put(uint64_t(bytes));
    append(data, bytes);
  }
  std::vector<std::byte> take() { return std::move(bytes_); }

 private:
  void append(const void* data, size_t bytes) {
    const auto* begin = static_cast<const std::byte*>(data);
    bytes_.insert(bytes_.end(), begin, begin + bytes);
  }
  std::vector<std::byte> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::vector<std::byte>& bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T value;
    read(&value, sizeof(T));
    return value;
  }
  std::vector<std::byte> get_blob() {
    const auto bytes = size_t(get<uint64_t>());
    std::vector<std::byte> blob(bytes);
    read(blob.data(), bytes);
    return blob;
  }

 private:
  void read(void* data, size_t bytes) {
    RINGPACK_CHECK(offset_ + bytes <= bytes_.size(), "a rank's results arrived truncated (",
                   bytes_.size(), " bytes)");
    if (bytes > 0) std::memcpy(data, bytes_.data() + offset_, bytes);
    offset_ += bytes;
  }
  const std::vector<std::byte>& bytes_;
  size_t offset_ = 0;
};

void put_tensor(ByteWriter& out, const HostTensor& t) {
  out.put(t.rows);
  out.put(t.tokens);
  out.put(uint64_t(t.token_bytes));
  out.put_blob(t.data(), t.size_bytes());
}

HostTensor get_tensor(ByteReader& in) {
  const int rows = in.get<int>();
  const int tokens = in.get<int>();
  const auto token_bytes = size_t(in.get<uint64_t>());
  HostTensor t(rows, tokens, token_bytes);
  t.bytes = in.get_blob();
  RINGPACK_CHECK(t.bytes.size() == size_t(rows) * size_t(tokens) * token_bytes,
                 "a rank's tensor arrived with ", t.bytes.size(), " bytes for its shape");
  return t;
}

void put_spans(ByteWriter& out, const std::vector<TraceSpan>& spans) {
  out.put(uint64_t(spans.size()));
  for (const TraceSpan& span : spans) {
    out.put(span.lane);
    out.put_blob(span.name.data(), span.name.size());
    out.put(span.step);
    out.put(span.start_seconds);
    out.put(span.end_seconds);
  }
}

std::vector<TraceSpan> get_spans(ByteReader& in) {
  std::vector<TraceSpan> spans(size_t(in.get<uint64_t>()));
  for (TraceSpan& span : spans) {
    span.lane = in.get<TraceSpan::Lane>();
    const std::vector<std::byte> name = in.get_blob();
    span.name.assign(reinterpret_cast<const char*>(name.data()), name.size());
    span.step = in.get<int>();
    span.start_seconds = in.get<double>();
    span.end_seconds = in.get<double>();
  }
  return spans;
}

std::vector<std::byte> serialize(const RankResult& result) {
  ByteWriter out;
  for (const HostTensor* t : {&result.out, &result.lse, &result.dq, &result.dk, &result.dv}) {
    put_tensor(out, *t);
  }
  const RankReport& r = result.report;
  out.put(r.rank);
  out.put(r.visible_pairs);
  out.put(r.steps_computed);
  out.put(r.steps_skipped);
  out.put(r.bytes_sent);
  out.put(r.forward_seconds);
  out.put(r.backward_seconds);
  out.put(r.compute_seconds);
  out.put(r.wait_seconds);
  out.put(r.transfer_seconds);
  put_spans(out, r.forward_spans);
  put_spans(out, r.backward_spans);
  return out.take();
}

RankResult deserialize(const std::vector<std::byte>& bytes) {
  ByteReader in(bytes);
  RankResult result;
  for (HostTensor* t : {&result.out, &result.lse, &result.dq, &result.dk, &result.dv}) {
    *t = get_tensor(in);
  }
  RankReport& r = result.report;
  r.rank = in.get<int>();
  r.visible_pairs = in.get<int64_t>();
  r.steps_computed = in.get<int>();
  r.steps_skipped = in.get<int>();
  r.bytes_sent = in.get<uint64_t>();
  r.forward_seconds = in.get<double>();
  r.backward_seconds = in.get<double>();
  r.compute_seconds = in.get<double>();
  r.wait_seconds = in.get<double>();
  r.transfer_seconds = in.get<double>();
  r.forward_spans = get_spans(in);
  r.backward_spans = get_spans(in);
  return result;
}

// FNV-1a, 64 bit.
class Fingerprint {
 public:
  void add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash_ = (hash_ ^ p[i]) * kPrime;
  }
  template <class T>
  void add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    add(&value, sizeof(T));
  }
  uint64_t value() const { return hash_; }

 private:
  static constexpr uint64_t kOffset = 14695981039346656037ull;
  static constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t hash_ = kOffset;
};

}  // namespace

std::vector<std::vector<std::byte>> all_gather_bytes(AttentionBackend& backend, Communicator& comm,
                                                     const std::vector<std::byte>& mine) {
  const uint64_t size = mine.size();
  const std::vector<std::byte> size_bytes = all_gather_fixed(backend, comm, &size, sizeof(size));
  std::vector<uint64_t> sizes(size_t(comm.size()));
  std::memcpy(sizes.data(), size_bytes.data(), size_bytes.size());
  const uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());

  std::vector<std::byte> padded = mine;
  padded.resize(max_size);
  const std::vector<std::byte> gathered =
      all_gather_fixed(backend, comm, padded.data(), padded.size());
  std::vector<std::vector<std::byte>> all(size_t(comm.size()));
  for (size_t r = 0; r < all.size(); ++r) {
    const std::byte* begin = gathered.data() + r * max_size;
    all[r].assign(begin, begin + sizes[r]);
  }
  return all;
}

uint64_t batch_fingerprint(const PackedBatch& batch, const BatchOptions& o, bool backward) {
  Fingerprint f;
  f.add(batch.batch);
  f.add(batch.seq_len);
  f.add(batch.segment_ids.data(), batch.segment_ids.size() * sizeof(int32_t));
  f.add(batch.positions.data(), batch.positions.size() * sizeof(int32_t));
  const std::string reorder = reorder_label(o.reorder);
  f.add(reorder.data(), reorder.size());
  for (int value : {o.cp, o.num_heads_q, o.num_heads_kv, o.head_dim, int(o.dtype), int(o.strategy),
                    int(o.mask.causal), int(backward)}) {
    f.add(value);
  }
  f.add(o.mask.window);
  f.add(o.seed);
  return f.value();
}

void check_same_batch(AttentionBackend& backend, Communicator& comm, uint64_t fingerprint) {
  const std::vector<std::byte> all =
      all_gather_fixed(backend, comm, &fingerprint, sizeof(fingerprint));
  std::vector<uint64_t> prints(size_t(comm.size()));
  std::memcpy(prints.data(), all.data(), all.size());
  for (int r = 1; r < comm.size(); ++r) {
    RINGPACK_CHECK(prints[size_t(r)] == prints[0], "rank ", r,
                   " built a different batch than rank 0 (its layout or options differ): start "
                   "every rank with the same options, layout file and seed");
  }
}

std::vector<RankResult> gather_results(AttentionBackend& backend, Communicator& comm,
                                       const RankResult& mine) {
  const std::vector<std::vector<std::byte>> all = all_gather_bytes(backend, comm, serialize(mine));
  std::vector<RankResult> results;
  results.reserve(all.size());
  for (const std::vector<std::byte>& bytes : all) results.push_back(deserialize(bytes));
  return results;
}

}  // namespace ringpack
