// The NCCL communicator: one process per GPU (docs/design.md §4; interface and stream-order
// contract in include/ringpack/comm.h). Host-only header: no NCCL or CUDA types. Without NCCL
// (RINGPACK_WITH_NCCL unset) the functions exist and throw an Error that says how to build with
// it (src/comm/nccl_unavailable.cpp).
//
// Streams and events (no host wait on data anywhere):
//  - every transfer (exchange, isend, irecv, all_gather, reduce_scatter_sum) first records a
//    "ready" event on the backend's compute stream and makes the communicator's transfer stream
//    (non-blocking, highest priority) wait on it: the transfer reads finished data and overwrites
//    no buffer that queued compute still reads;
//  - then it enqueues the NCCL group on the transfer stream, between two timeline marks when a
//    timeline is set, and records a "done" event there;
//  - CommRequest::wait() (and the end of all_gather / reduce_scatter_sum) makes the compute
//    stream wait on "done". A request destroyed without wait() does the same, so stream-ordered
//    frees of its buffers that follow are safe.
// exchange() is ONE group {ncclSend to dst; ncclRecv from src}, so a ring of any size cannot
// deadlock. isend() and irecv() are each a group of their own: two ranks that both isend before
// they irecv can deadlock on the device (a send waits for its receive, queued behind it on the
// peer's stream); the schedules use exchange().
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): initialisation and every call
// that returns ncclInProgress are polled (ncclCommGetAsyncError) with the deadline
// timeout_seconds, so a missing or dead rank cannot hang the host: at the deadline, or on an
// NCCL error, the communicator is aborted and an Error names this rank and the cause.
// check_failures() polls NCCL's asynchronous error and the transfer stream's CUDA status;
// barrier() is an all-reduce of one int followed by a polled wait for the transfer stream.
// abort() calls ncclCommAbort. The destructor of a healthy communicator finalises it
// (ncclCommFinalize, polled with the deadline) and destroys it; a failed one is aborted.
//
// Devices. The communicator runs on the device of the backend's compute stream (the backend
// must be the CUDA backend). NCCL refuses two ranks on one GPU of one host ("Duplicate GPU
// detected"); tests that share one GPU between ranks set a different NCCL_HOSTID per rank, plus
// NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1. make_nccl_communicator checks this before NCCL does,
// over its rendezvous, and says so (it reads NCCL_HOSTID, as NCCL does, to know which ranks NCCL
// will take for one host).
//
// bytes_sent() counts what leaves this rank: `bytes` per exchange / isend, (size - 1) times the
// per-rank size per all_gather / reduce_scatter_sum.
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "comm/launcher.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"

namespace ringpack {

constexpr size_t kNcclUniqueIdBytes = 128;  // sizeof(ncclUniqueId)
using NcclUniqueId = std::array<unsigned char, kNcclUniqueIdBytes>;

// Whether this build has the NCCL communicator.
bool nccl_available();

// A fresh NCCL unique id (ncclGetUniqueId): made by one rank, handed to all (for callers that
// have their own way to broadcast it, e.g. a framework's process group).
NcclUniqueId make_nccl_unique_id();

// The GPU a launched rank drives: launcher_device(env, number of visible CUDA devices), i.e.
// local_rank % device count (launcher.h). Throws when no device is visible.
int launcher_device(const LauncherEnv& env);

// The communicator of a launched job (torchrun, mpirun, srun): ranks meet at the TCP rendezvous
// of rendezvous_config(env) (MASTER_ADDR:MASTER_PORT + 1; unset MASTER_ADDR is an Error saying
// how to set it), check that no two ranks share a GPU of one host and run the same NCCL; rank 0
// makes the unique id and broadcasts it; then every rank initialises NCCL. A world of one needs
// no rendezvous. `backend` (the CUDA backend; its compute stream) must outlive the communicator.
std::unique_ptr<Communicator> make_nccl_communicator(
    const LauncherEnv& env, AttentionBackend& backend,
    double timeout_seconds = kDefaultCommTimeoutSeconds);

// The communicator of rank `rank` of `size` from a unique id every rank received
// (kNcclUniqueIdBytes bytes at `unique_id`).
std::unique_ptr<Communicator> make_nccl_communicator_from_id(
    const void* unique_id, int rank, int size, AttentionBackend& backend,
    double timeout_seconds = kDefaultCommTimeoutSeconds);

// Wraps an existing ncclComm_t (e.g. a framework's), which must live on the backend's device.
// The communicator never finalises or destroys it. abort() only marks the wrapper unusable (every
// later call throws) and leaves the NCCL communicator to its owner, who must abort it to stop
// transfers in flight. A blocking borrowed communicator may block the host inside NCCL calls (no
// deadline can apply there); waits of the wrapper itself keep their deadline.
std::unique_ptr<Communicator> borrow_nccl_communicator(
    void* nccl_comm, AttentionBackend& backend,
    double timeout_seconds = kDefaultCommTimeoutSeconds);

}  // namespace ringpack
