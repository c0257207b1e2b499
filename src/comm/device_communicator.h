// The device communicator: `size` virtual CP ranks of ONE GPU, one host thread per rank, each
// with its own CUDA backend (its own compute stream) on the same device; they share a
// DeviceWorld (docs/design.md §4; interface and stream-order contract in include/ringpack/comm.h).
// Transfers are device-to-device copies on a transfer stream: no host staging, and no host wait
// on data. Host-only header: no CUDA types. Without CUDA (RINGPACK_WITH_CUDA unset) the functions
// exist and throw an Error (src/comm/device_unavailable.cpp).
//
// Matching. isend / irecv register an op in the world under its mutex; ops match per
// (src, dst, channel) in posting order (FIFO), like the in-process communicator. Collectives use
// their own channel, so they never match point-to-point ops.
//
// Ordering (which stream waits on which event):
//  - Post: the poster records a "ready" event on its compute stream (after everything enqueued
//    there so far: the data a send reads is written, the queued work that still reads a receive
//    buffer is done, the buffers' stream-ordered allocations happened).
//  - Match (by whichever rank thread posts the second op of the pair, under the world mutex), on
//    the RECEIVER's transfer stream (highest priority, non-blocking), in this order:
//      cudaStreamWaitEvent(sender's ready); cudaStreamWaitEvent(receiver's ready);
//      [timeline mark "start"]; cudaMemcpyAsync(dst, src, bytes, DeviceToDevice);
//      [timeline mark "end"]; cudaEventRecord(done).
//    Both ops share that one "done" event.
//  - CommRequest::wait() blocks the host only until the op is matched (the peer posted), with the
//    deadline timeout_seconds and failure checks, then cudaStreamWaitEvent(own compute stream,
//    done). Senders and receivers both wait: a sender may overwrite or free its buffer after it.
//  - A request destroyed without wait(): an unmatched op is withdrawn; a matched one makes the
//    compute stream wait on done (no host wait), so stream-ordered frees that follow are safe.
//  - all_gather / reduce_scatter_sum post every op of the call with one ready event, wait for
//    all matches on the host, and make the compute stream wait on every done event. The local
//    chunk is copied, and reduce_scatter_sum sums, on the compute stream: recv = chunk of rank 0,
//    then += chunk of rank 1, 2, ... (rank order on every rank, as the in-process communicator).
//  - barrier(): host barrier, then this rank's transfer stream drains (polled, with deadline),
//    then a second host barrier: every transfer posted before the barrier has run when it returns.
//
// Timeline marks: the receiver's timeline (set_timeline at the time the irecv was posted) marks
// its transfer stream around the copy. The receiving request returns them (exchange(): the
// receive's); send requests return nullopt. marks() of an unmatched receive blocks the host until
// the peer posts (as wait() does), since the marks only exist from the match on: call it after
// posting everything the peer needs to post its side (exchange() posts both halves first).
//
// Failures: abort() marks the world failed without blocking; every host wait of the other ranks
// then throws AbortedError ("rank r failed"). A communicator that is destroyed marks its rank as
// departed: a wait for an op that rank never posted throws at once instead of timing out.
// check_failures() also reports a CUDA error of the transfer stream.
#pragma once

#include <memory>

#include "ringpack/attention.h"
#include "ringpack/comm.h"

namespace ringpack {

class DeviceWorld;  // shared by the ranks of one run

// The world of `size` ranks; every host wait of its communicators gives up after
// timeout_seconds.
std::shared_ptr<DeviceWorld> make_device_world(int size, double timeout_seconds);

// The communicator of `rank`; `backend` must be a CUDA backend (its stream() is the rank's
// compute stream) and must outlive the communicator. Every rank of a world must use the same
// device. Each rank is attached once.
std::unique_ptr<Communicator> make_device_communicator(std::shared_ptr<DeviceWorld> world, int rank,
                                                       AttentionBackend& backend);

}  // namespace ringpack
