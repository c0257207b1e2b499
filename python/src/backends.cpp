#include "backends.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace ringpack::python {

AttentionBackend& backend_for(const BackendKey& key) {
  using Key = std::tuple<bool, int, std::uintptr_t, bool, int>;
  static std::mutex mutex;
  static auto* backends = new std::map<Key, std::unique_ptr<AttentionBackend>>();  // never freed:
  // CUDA may be torn down before static destructors run at interpreter exit.
  const Key k{key.cuda, key.cuda ? key.device : 0, key.cuda ? key.stream : 0, key.deterministic,
              key.cuda ? 0 : key.threads};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = backends->find(k);
  if (it != backends->end()) return *it->second;
  BackendOptions options;
  options.device = key.device;
  options.deterministic = key.deterministic;
  options.num_threads = key.threads;
  // Stream 0 is the legacy default stream (a framework's default stream reports 0); the backend
  // takes 0 to mean "make your own", so name the legacy stream by its handle, cudaStreamLegacy.
  options.stream = key.cuda && key.stream == 0 ? std::uintptr_t(1) : key.stream;
  auto backend = make_backend(key.cuda ? BackendKind::kCuda : BackendKind::kCpu, options);
  return *backends->emplace(k, std::move(backend)).first->second;
}

bool cuda_built() {
#ifdef RINGPACK_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace ringpack::python
