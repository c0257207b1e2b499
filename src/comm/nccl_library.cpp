// NCCL, loaded when first used (docs/design.md §4). The library calls NCCL's C API as declared in
// nccl.h; the definitions below forward each call to the libnccl this process uses, found on the
// first call:
//  1. an NCCL the process already loaded (a framework's: torch and jax bring their own), so that
//     one process runs one NCCL;
//  2. the libnccl this build was configured with (RINGPACK_NCCL_LIBRARY_PATH);
//  3. libnccl.so.2 on the loader's search path.
// Nothing links libnccl at build time, so importing the Python extension never puts a second
// NCCL (and its soname) into a framework's process before the framework loads its own.
#include <dlfcn.h>
#include <nccl.h>

#include <string>

#include "ringpack/error.h"

namespace ringpack {
namespace {

void* nccl_handle() {
  static void* const handle = [] {
    if (void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD)) return h;
    if (void* h = dlopen(RINGPACK_NCCL_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL)) return h;
    return dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  }();
  if (handle == nullptr) {
    const char* why = dlerror();
    RINGPACK_FAIL("NCCL could not be loaded (neither ", RINGPACK_NCCL_LIBRARY_PATH,
                  " nor libnccl.so.2 on the library path: ", why ? why : "not found",
                  "); install NCCL or add its folder to LD_LIBRARY_PATH");
  }
  return handle;
}

template <class Function>
Function nccl_symbol(const char* name) {
  void* symbol = dlsym(nccl_handle(), name);
  RINGPACK_CHECK(symbol != nullptr, "the loaded NCCL has no ", name,
                 " (too old: ringpack needs NCCL 2.27 or later)");
  return reinterpret_cast<Function>(symbol);
}

}  // namespace
}  // namespace ringpack

// One forwarding definition per NCCL function the library uses.
#define RINGPACK_NCCL_FORWARD(Result, name, params, args)                       \
  Result name params {                                                          \
    static const auto forward = ringpack::nccl_symbol<Result(*) params>(#name); \
    return forward args;                                                        \
  }

extern "C" {

RINGPACK_NCCL_FORWARD(ncclResult_t, ncclGetVersion, (int* version), (version))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommInitRank,
                      (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank),
                      (comm, nranks, id, rank))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommInitRankConfig,
                      (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank,
                       ncclConfig_t* config),
                      (comm, nranks, id, rank, config))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommFinalize, (ncclComm_t comm), (comm))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error),
                      (comm, error))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count),
                      (comm, count))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device),
                      (comm, device))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank),
                      (comm, rank))
RINGPACK_NCCL_FORWARD(const char*, ncclGetErrorString, (ncclResult_t result), (result))
RINGPACK_NCCL_FORWARD(const char*, ncclGetLastError, (ncclComm_t comm), (comm))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclGroupStart, (), ())
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclGroupEnd, (), ())
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclSend,
                      (const void* data, size_t count, ncclDataType_t type, int peer,
                       ncclComm_t comm, cudaStream_t stream),
                      (data, count, type, peer, comm, stream))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclRecv,
                      (void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                       cudaStream_t stream),
                      (data, count, type, peer, comm, stream))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclAllGather,
                      (const void* send, void* recv, size_t count, ncclDataType_t type,
                       ncclComm_t comm, cudaStream_t stream),
                      (send, recv, count, type, comm, stream))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclAllReduce,
                      (const void* send, void* recv, size_t count, ncclDataType_t type,
                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                      (send, recv, count, type, op, comm, stream))
RINGPACK_NCCL_FORWARD(ncclResult_t, ncclReduceScatter,
                      (const void* send, void* recv, size_t count, ncclDataType_t type,
                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                      (send, recv, count, type, op, comm, stream))

}  // extern "C"
