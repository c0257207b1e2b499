// A small TCP rendezvous of the ranks of one job (docs/design.md §4): rank 0 listens, every other
// rank connects to it, and over these connections rank 0 broadcasts a blob (the NCCL unique id),
// gathers one value per rank and hands every rank the same verdict. POSIX sockets only; it needs
// nothing but MASTER_ADDR / MASTER_PORT, so it works under torchrun, mpirun and srun alike.
//
// Port. Rank 0 listens on MASTER_PORT + 1 on every interface of its host (IPv4, or IPv6 with
// IPv4 too when MASTER_ADDR is an IPv6 name): torchrun's own TCP store already listens on
// MASTER_PORT, so the rendezvous keeps clear of it.
//
// Deadlines. Every socket call waits in poll() with the operation's deadline (timeout_seconds
// from the start of the constructor or of the call). Ranks that start late are waited for: a
// connecting rank retries until its deadline; rank 0 accepts until its own. The other ranks wait
// 2 s longer than their deadline for messages of rank 0, so that they report its verdict (which
// names the cause) rather than a timeout of their own.
//
// Errors are ringpack::Error naming this rank, the address:port and the cause. Rank 0 checks the
// greeting of every rank (each of 1..n-1 exactly once, the same world size) and, when something
// fails on its side (a rank missing at the deadline, a world size that differs, a rank that
// closed its connection), sends the message to every connected rank before throwing, so the
// whole job stops with the same message instead of timing out one rank after another. After
// an error the object is unusable (every call throws).
//
// The protocol (one TCP stream per rank, little-endian frames {magic, kind, length, payload}) is
// internal: every rank of a job runs the same build.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/launcher.h"
#include "ringpack/comm.h"

namespace ringpack {

struct RendezvousConfig {
  std::string address;  // rank 0's host: MASTER_ADDR (a name or an IPv4/IPv6 address)
  int port = 0;         // where rank 0 listens: MASTER_PORT + 1
  int rank = 0;
  int world_size = 1;
  double timeout_seconds = kDefaultCommTimeoutSeconds;
};

// The rendezvous of a launched job: MASTER_ADDR and MASTER_PORT + 1. Throws ringpack::Error
// when MASTER_ADDR or MASTER_PORT is unset, saying how to set them for env.launcher (with mpirun
// on one node: export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 and pass -x MASTER_ADDR -x
// MASTER_PORT).
RendezvousConfig rendezvous_config(const LauncherEnv& env, double timeout_seconds);

class Rendezvous {
 public:
  // Connects the job: returns on every rank once all world_size ranks have met at rank 0 (a
  // world of one returns at once and opens no socket).
  explicit Rendezvous(const RendezvousConfig& config);
  ~Rendezvous();  // closes the connections
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return config_.rank; }
  int size() const { return config_.world_size; }

  // Rank 0's `bytes` of `data` land in `data` on every rank (every rank passes the same size).
  void broadcast(void* data, size_t bytes);

  // Every rank passes one value; rank 0 returns all of them, indexed by rank; the others get an
  // empty vector. Rank 0 decides on them and calls settle(); the others call settle() too.
  std::vector<std::string> gather(std::string_view value);
  // Every rank calls it. Rank 0 passes its verdict: empty = go on; otherwise the message every
  // rank (rank 0 included) throws as ringpack::Error. The others' argument is ignored.
  void settle(const std::string& verdict);

  // Every rank passes a value (a hash of the batch, of the options); throws on every rank when a
  // rank's value differs from rank 0's, naming `what`, the first such rank and both values.
  void check_agree(uint64_t value, std::string_view what);

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  // One connection: rank 0 holds one per other rank (peers_[r - 1] is rank r), the others one,
  // to rank 0.
  struct Peer {
    int fd = -1;
    std::string from;  // the peer's address:port, for messages
  };

  void accept_all(Deadline until);
  void connect_to_root(Deadline until);
  Deadline deadline() const;     // now + timeout_seconds
  std::string endpoint() const;  // "address:port" of rank 0
  void check_usable() const;
  // Rank 0: sends `message` to every connected rank (best effort), then every rank: closes the
  // connections, marks the object unusable and throws Error(message).
  [[noreturn]] void fail(const std::string& message);
  void close_all();

  RendezvousConfig config_;
  int listen_fd_ = -1;
  std::vector<Peer> peers_;
  bool broken_ = false;
};

// Ranks for a message: "2", "2 and 5", "2, 3 and 5".
std::string rank_list(const std::vector<int>& ranks);

}  // namespace ringpack
