// The TCP rendezvous (rendezvous.h): non-blocking POSIX sockets, every wait in poll() with a
// deadline.
#include "comm/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "ringpack/error.h"

namespace ringpack {
namespace {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

constexpr uint32_t kMagic = 0x31'4B'50'52;  // "RPK1" in little-endian bytes
constexpr size_t kHeaderBytes = 16;         // magic (u32), kind (u32), payload length (u64)
constexpr uint64_t kMaxPayloadBytes = uint64_t{64} << 20;
// How long rank 0 waits for the greeting of a fresh connection before it drops it (a port
// scanner or a stray client must not stall the job).
constexpr std::chrono::seconds kGreetingTimeout{10};
// Longest wait of one connection attempt, so that every address of MASTER_ADDR gets its turn.
constexpr std::chrono::seconds kConnectAttemptTimeout{10};
constexpr std::chrono::milliseconds kConnectRetryPause{50};
// Rank 0 tells the others about a failure within this time (best effort).
constexpr std::chrono::seconds kFailureNoticeTimeout{2};
// The other ranks wait this much longer than their deadline for a message of rank 0, so that
// when rank 0 gives up (on a missing rank, say) they report its verdict, not their own timeout.
constexpr std::chrono::seconds kVerdictGrace{2};

enum class Kind : uint32_t {
  kHello = 1,   // rank -> rank 0: i32 rank, i32 world size
  kStatus = 2,  // rank 0 -> rank: u8 0 (go on) or 1 (failed) + message
  kBlob = 3,    // rank 0 -> rank: the broadcast bytes
  kValue = 4,   // rank -> rank 0: one gathered value
};

// A socket call that did not complete; the caller names the peer and the operation.
class IoError : public std::runtime_error {
 public:
  enum class Reason { kTimeout, kClosed, kFailed, kProtocol };
  IoError(Reason why, const std::string& cause) : std::runtime_error(cause), reason(why) {}
  Reason reason;
};

std::string errno_text(int error) {
  return std::strerror(error);
}

// Milliseconds poll() may wait until `deadline` (0 when it passed).
int poll_timeout_ms(Deadline deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  constexpr int64_t kMaxSliceMs = 1000;  // wake up now and then; harmless
  return int(std::clamp<int64_t>(left.count(), 0, kMaxSliceMs));
}

// Waits until `fd` has one of `events`; false when the deadline passed first.
bool wait_fd(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, poll_timeout_ms(deadline));
    if (ready > 0) return true;  // including POLLERR / POLLHUP: the next call reports them
    if (ready < 0 && errno != EINTR) {
      throw IoError(IoError::Reason::kFailed, "poll: " + errno_text(errno));
    }
    if (ready == 0 && Clock::now() >= deadline) return false;
  }
}

void send_all(int fd, const void* data, size_t bytes, Deadline deadline) {
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t sent = ::send(fd, cursor, bytes, MSG_NOSIGNAL);
    if (sent > 0) {
      cursor += sent;
      bytes -= size_t(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        throw IoError(IoError::Reason::kTimeout, "the peer did not take the data in time");
      }
      continue;
    }
    if (sent < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      throw IoError(IoError::Reason::kClosed, "the connection was closed");
    }
    throw IoError(IoError::Reason::kFailed, "send: " + errno_text(errno));
  }
}

void recv_all(int fd, void* data, size_t bytes, Deadline deadline) {
  auto* cursor = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = ::recv(fd, cursor, bytes, 0);
    if (got > 0) {
      cursor += got;
      bytes -= size_t(got);
      continue;
    }
    if (got == 0) throw IoError(IoError::Reason::kClosed, "the connection was closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline)) {
        throw IoError(IoError::Reason::kTimeout, "nothing arrived in time");
      }
      continue;
    }
    if (errno == ECONNRESET) throw IoError(IoError::Reason::kClosed, "the connection was reset");
    throw IoError(IoError::Reason::kFailed, "recv: " + errno_text(errno));
  }
}

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(char((value >> (8 * i)) & 0xFF));
}
void put_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(char((value >> (8 * i)) & 0xFF));
}
uint64_t get_le(const char* bytes, int count) {
  uint64_t value = 0;
  for (int i = 0; i < count; ++i) value |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  return value;
}

struct Frame {
  Kind kind = Kind::kStatus;
  std::string payload;
};

void send_frame(int fd, Kind kind, std::string_view payload, Deadline deadline) {
  std::string message;
  message.reserve(kHeaderBytes + payload.size());
  put_u32(message, kMagic);
  put_u32(message, uint32_t(kind));
  put_u64(message, payload.size());
  message.append(payload);
  send_all(fd, message.data(), message.size(), deadline);
}

Frame recv_frame(int fd, Deadline deadline) {
  char header[kHeaderBytes];
  recv_all(fd, header, sizeof(header), deadline);
  if (get_le(header, 4) != kMagic) {
    throw IoError(IoError::Reason::kProtocol, "the peer does not speak the ringpack rendezvous");
  }
  const uint64_t length = get_le(header + 8, 8);
  if (length > kMaxPayloadBytes) {
    throw IoError(IoError::Reason::kProtocol,
                  detail::concat("a message of ", length, " bytes is too large"));
  }
  Frame frame{Kind(get_le(header + 4, 4)), std::string(size_t(length), '\0')};
  recv_all(fd, frame.payload.data(), frame.payload.size(), deadline);
  return frame;
}

std::string status_payload(const std::string& error) {
  return std::string(1, error.empty() ? '\0' : '\1') + error;
}

Deadline earlier(Deadline a, Deadline b) {
  return std::min(a, b);
}

// "host:port" of a socket address (IPv6 in brackets).
std::string address_text(const sockaddr* address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return detail::concat(host, ":", port);
  }
  if (address->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return detail::concat("[", host, "]:", port);
}

void set_no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // latency only: not checked
}

// Addresses of `host`:`port` (TCP), in getaddrinfo's order. Throws IoError(kFailed) with the
// resolver's message; a temporary failure (EAI_AGAIN) is kTimeout, worth a retry.
struct AddressList {
  addrinfo* head = nullptr;
  AddressList(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    const std::string service = std::to_string(port);
    const int status = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &head);
    if (status != 0) {
      head = nullptr;
      throw IoError(
          status == EAI_AGAIN ? IoError::Reason::kTimeout : IoError::Reason::kFailed,
          std::string("cannot resolve MASTER_ADDR '") + host + "': " + ::gai_strerror(status));
    }
  }
  ~AddressList() {
    if (head != nullptr) ::freeaddrinfo(head);
  }
  AddressList(const AddressList&) = delete;
  AddressList& operator=(const AddressList&) = delete;
};

// One non-blocking connect to `address`; the connected socket, or -1 with `cause` set.
int try_connect(const addrinfo& address, Deadline deadline, std::string& cause) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          address.ai_protocol);
  if (fd < 0) {
    cause = "socket: " + errno_text(errno);
    return -1;
  }
  int error = 0;
  if (::connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    error = errno;
    if (error == EINPROGRESS || error == EINTR) {
      if (!wait_fd(fd, POLLOUT, earlier(deadline, Clock::now() + kConnectAttemptTimeout))) {
        error = ETIMEDOUT;
      } else {
        socklen_t length = sizeof(error);
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
      }
    }
  }
  if (error != 0) {
    cause = errno_text(error);
    ::close(fd);
    return -1;
  }
  return fd;
}

// A listening socket on every interface at `port`, of the family of `host`'s first address
// (IPv6 listens for IPv4 too); -1 with `cause` set when none could be opened.
int listen_on(const std::string& host, int port, int backlog, std::string& cause) {
  int family = AF_INET;
  try {
    AddressList addresses(host, port);
    if (addresses.head->ai_family == AF_INET6) family = AF_INET6;
  } catch (const IoError&) {
    // The others will say that they cannot resolve it; rank 0 listens on IPv4 meanwhile.
  }
  for (const int candidate : {family, int(AF_INET)}) {
    const int fd = ::socket(candidate, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      cause = "socket: " + errno_text(errno);
      continue;
    }
    const int one = 1;
    const int zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage address{};
    socklen_t length = 0;
    if (candidate == AF_INET6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
      in6->sin6_family = AF_INET6;
      in6->sin6_addr = in6addr_any;
      in6->sin6_port = htons(uint16_t(port));
      length = sizeof(sockaddr_in6);
    } else {
      auto* in = reinterpret_cast<sockaddr_in*>(&address);
      in->sin_family = AF_INET;
      in->sin_addr.s_addr = htonl(INADDR_ANY);
      in->sin_port = htons(uint16_t(port));
      length = sizeof(sockaddr_in);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
        ::listen(fd, backlog) == 0) {
      return fd;
    }
    cause = errno_text(errno);
    ::close(fd);
    if (candidate == AF_INET) break;
  }
  return -1;
}

std::string hex(uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(16) << std::setfill('0') << value;
  return out.str();
}

}  // namespace

RendezvousConfig rendezvous_config(const LauncherEnv& env, double timeout_seconds) {
  std::string how;
  if (env.launcher == "mpirun" || env.launcher == "pmi") {
    how =
        "with mpirun on one node: export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 and pass "
        "-x MASTER_ADDR -x MASTER_PORT to mpirun; on several nodes use the first node's "
        "address";
  } else if (env.launcher == "slurm") {
    how =
        "in the job script: export MASTER_ADDR=$(scontrol show hostnames "
        "\"$SLURM_JOB_NODELIST\" | head -n 1) MASTER_PORT=29500";
  } else {
    how =
        "torchrun sets both; when starting the processes by hand, export MASTER_ADDR=<rank 0's "
        "host> MASTER_PORT=29500 for every rank";
  }
  RINGPACK_CHECK(!env.master_addr.empty(), describe(env),
                 ": MASTER_ADDR is not set: the nccl communicator meets the other ranks at rank "
                 "0's host (a TCP rendezvous on MASTER_PORT + 1); ",
                 how);
  RINGPACK_CHECK(env.master_port > 0, describe(env),
                 ": MASTER_PORT is not set: the nccl communicator meets the other ranks at "
                 "MASTER_ADDR:MASTER_PORT + 1; ",
                 how);
  RendezvousConfig config;
  config.address = env.master_addr;
  config.port = env.master_port + 1;
  config.rank = env.rank;
  config.world_size = env.world_size;
  config.timeout_seconds = timeout_seconds;
  return config;
}

Rendezvous::Rendezvous(const RendezvousConfig& config) : config_(config) {
  RINGPACK_CHECK(config_.world_size >= 1 && config_.rank >= 0 && config_.rank < config_.world_size,
                 "rendezvous: rank ", config_.rank, " of a world of ", config_.world_size,
                 " does not exist");
  RINGPACK_CHECK(config_.port >= 1 && config_.port <= 65535, "rank ", config_.rank,
                 ": rendezvous port ", config_.port, " is not a TCP port (1..65535)");
  RINGPACK_CHECK(config_.timeout_seconds > 0, "rank ", config_.rank, ": rendezvous timeout ",
                 config_.timeout_seconds, " s must be positive (--comm-timeout)");
  if (config_.world_size == 1) return;
  const Deadline until = deadline();
  if (config_.rank == 0) {
    accept_all(until);
  } else {
    connect_to_root(until);
  }
}

Rendezvous::~Rendezvous() {
  close_all();
}

Rendezvous::Deadline Rendezvous::deadline() const {
  // Capped so that a huge --comm-timeout cannot overflow the clock.
  constexpr double kMaxSeconds = 1e7;
  const std::chrono::duration<double> timeout(std::min(config_.timeout_seconds, kMaxSeconds));
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
}

std::string Rendezvous::endpoint() const {
  const bool ipv6 = config_.address.find(':') != std::string::npos;
  return ipv6 ? detail::concat("[", config_.address, "]:", config_.port)
              : detail::concat(config_.address, ":", config_.port);
}

void Rendezvous::check_usable() const {
  RINGPACK_CHECK(!broken_, "rank ", config_.rank, ": the rendezvous at ", endpoint(),
                 " failed before; it cannot be used again");
}

void Rendezvous::close_all() {
  for (Peer& peer : peers_) {
    if (peer.fd < 0) continue;
    // Read what the peer sent and nobody will read: closing a socket with unread data resets
    // the connection, which may cost the peer the last message sent to it.
    ::shutdown(peer.fd, SHUT_WR);
    char sink[256];
    while (::recv(peer.fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
    ::close(peer.fd);
    peer.fd = -1;
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void Rendezvous::fail(const std::string& message) {
  if (config_.rank == 0) {
    const Deadline until = Clock::now() + kFailureNoticeTimeout;
    for (Peer& peer : peers_) {
      if (peer.fd < 0) continue;
      try {
        send_frame(peer.fd, Kind::kStatus, status_payload(message), until);
      } catch (const IoError&) {
        // That rank is gone already; the others still hear about it.
      }
    }
  }
  close_all();
  broken_ = true;
  throw Error(message);
}

void Rendezvous::accept_all(Deadline until) {
  const int world = config_.world_size;
  std::string cause;
  listen_fd_ = listen_on(config_.address, config_.port, std::max(world, 128), cause);
  if (listen_fd_ < 0) {
    fail(detail::concat("rank 0: cannot listen for the rendezvous on port ", config_.port, ": ",
                        cause,
                        "; the rendezvous uses MASTER_PORT + 1: choose a MASTER_PORT whose next "
                        "port is free (and the same on every rank)"));
  }
  peers_.assign(size_t(world - 1), Peer{});
  int connected = 0;
  std::string ignored;  // connections dropped because they sent no ringpack greeting
  while (connected < world - 1) {
    if (!wait_fd(listen_fd_, POLLIN, until)) {
      std::vector<int> missing;
      for (int r = 1; r < world; ++r) {
        if (peers_[size_t(r - 1)].fd < 0) missing.push_back(r);
      }
      fail(detail::concat(
          "rank 0: ", missing.size() == 1 ? "rank " : "ranks ", rank_list(missing),
          " did not reach the rendezvous at ", endpoint(), " within ", config_.timeout_seconds,
          " s (--comm-timeout); did ", missing.size() == 1 ? "it" : "they",
          " start, with the same MASTER_ADDR, MASTER_PORT and world size (", world, ")?", ignored));
    }
    sockaddr_storage from_address{};
    socklen_t from_length = sizeof(from_address);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from_address), &from_length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      fail(detail::concat("rank 0: accepting a rank at the rendezvous on port ", config_.port,
                          " failed: ", errno_text(errno)));
    }
    set_no_delay(fd);
    const std::string from = address_text(reinterpret_cast<const sockaddr*>(&from_address));
    Frame hello;
    try {
      hello = recv_frame(fd, earlier(until, Clock::now() + kGreetingTimeout));
    } catch (const IoError& error) {
      ::close(fd);
      ignored = detail::concat(" (a connection from ", from, " was dropped: ", error.what(), ")");
      continue;
    }
    if (hello.kind != Kind::kHello || hello.payload.size() != 8) {
      ::close(fd);
      ignored = detail::concat(" (a connection from ", from,
                               " was dropped: it sent no rendezvous greeting)");
      continue;
    }
    const int rank = int(int32_t(uint32_t(get_le(hello.payload.data(), 4))));
    const int size = int(int32_t(uint32_t(get_le(hello.payload.data() + 4, 4))));
    std::string problem;
    if (size != world) {
      problem = detail::concat("rank 0: rank ", rank, " (from ", from,
                               ") was started with a world size of ", size, ", rank 0 with ", world,
                               ": every rank needs the same world size (WORLD_SIZE, -np)");
    } else if (rank == 0) {
      problem = detail::concat("rank 0: a second process (from ", from,
                               ") says it is rank 0: every process needs its own rank");
    } else if (rank < 0 || rank >= world) {
      problem = detail::concat("rank 0: a process from ", from, " says it is rank ", rank,
                               ", outside 0..", world - 1);
    } else if (peers_[size_t(rank - 1)].fd >= 0) {
      problem = detail::concat("rank 0: rank ", rank, " connected twice (from ",
                               peers_[size_t(rank - 1)].from, " and from ", from,
                               "): every process needs its own rank");
    }
    if (!problem.empty()) {
      try {
        send_frame(fd, Kind::kStatus, status_payload(problem),
                   Clock::now() + kFailureNoticeTimeout);
      } catch (const IoError&) {
      }
      ::close(fd);
      fail(problem);
    }
    peers_[size_t(rank - 1)] = Peer{fd, from};
    ++connected;
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  // Everyone is here: let them go on.
  for (int r = 1; r < world; ++r) {
    Peer& peer = peers_[size_t(r - 1)];
    try {
      send_frame(peer.fd, Kind::kStatus, status_payload({}), until);
    } catch (const IoError& error) {
      fail(detail::concat("rank 0: rank ", r, " (from ", peer.from,
                          ") left the rendezvous before it completed: ", error.what()));
    }
  }
}

void Rendezvous::connect_to_root(Deadline until) {
  const int rank = config_.rank;
  std::string cause = "no address";
  int fd = -1;
  while (fd < 0) {
    try {
      AddressList addresses(config_.address, config_.port);
      for (const addrinfo* address = addresses.head; address != nullptr && fd < 0;
           address = address->ai_next) {
        fd = try_connect(*address, until, cause);
      }
    } catch (const IoError& error) {
      cause = error.what();
      if (error.reason != IoError::Reason::kTimeout) {
        fail(detail::concat("rank ", rank, ": ", cause,
                            "; set MASTER_ADDR to rank 0's host name or IP address, the same on "
                            "every rank"));
      }
    }
    if (fd >= 0) break;
    if (Clock::now() + kConnectRetryPause >= until) {
      fail(detail::concat("rank ", rank, ": could not reach the rendezvous at ", endpoint(),
                          " within ", config_.timeout_seconds, " s (--comm-timeout): ", cause,
                          "; is rank 0 running, and MASTER_ADDR/MASTER_PORT the same on every "
                          "rank?"));
    }
    std::this_thread::sleep_for(kConnectRetryPause);
  }
  peers_.assign(1, Peer{fd, endpoint()});
  set_no_delay(fd);

  std::string hello;
  put_u32(hello, uint32_t(int32_t(rank)));
  put_u32(hello, uint32_t(int32_t(config_.world_size)));
  Frame welcome;
  try {
    send_frame(fd, Kind::kHello, hello, until);
    welcome = recv_frame(fd, until + kVerdictGrace);
  } catch (const IoError& error) {
    switch (error.reason) {
      case IoError::Reason::kTimeout:
        fail(detail::concat("rank ", rank, ": reached the rendezvous at ", endpoint(),
                            " but not every rank arrived within ", config_.timeout_seconds,
                            " s (--comm-timeout); rank 0 names the missing ones"));
      case IoError::Reason::kProtocol:
        fail(detail::concat("rank ", rank, ": the program at ", endpoint(),
                            " is not a ringpack rendezvous (", error.what(),
                            "): the rendezvous uses MASTER_PORT + 1; is that port taken by "
                            "another program, or MASTER_PORT different on rank 0?"));
      default:
        fail(detail::concat("rank ", rank, ": the rendezvous at ", endpoint(),
                            " failed while waiting for the other ranks: ", error.what(),
                            " (did rank 0 fail? see its error)"));
    }
  }
  if (welcome.kind != Kind::kStatus || welcome.payload.empty()) {
    fail(detail::concat("rank ", rank, ": the program at ", endpoint(),
                        " answered with something other than the ringpack rendezvous"));
  }
  if (welcome.payload[0] != '\0') fail(welcome.payload.substr(1));
}

void Rendezvous::broadcast(void* data, size_t bytes) {
  check_usable();
  if (config_.world_size == 1) return;
  const Deadline until = deadline();
  if (config_.rank == 0) {
    const std::string_view blob(static_cast<const char*>(data), bytes);
    for (int r = 1; r < config_.world_size; ++r) {
      const Peer& peer = peers_[size_t(r - 1)];
      try {
        send_frame(peer.fd, Kind::kBlob, blob, until);
      } catch (const IoError& error) {
        fail(detail::concat("rank 0: sending ", bytes, " bytes to rank ", r, " (", peer.from,
                            ") over the rendezvous failed: ", error.what(), " (did rank ", r,
                            " fail? see its error)"));
      }
    }
    return;
  }
  Frame frame;
  try {
    frame = recv_frame(peers_[0].fd, until + kVerdictGrace);
  } catch (const IoError& error) {
    fail(detail::concat("rank ", config_.rank, ": receiving ", bytes,
                        " bytes from rank 0 over the rendezvous at ", endpoint(),
                        " failed: ", error.what(),
                        error.reason == IoError::Reason::kTimeout
                            ? detail::concat(" within ", config_.timeout_seconds,
                                             " s (--comm-timeout); is rank 0 stuck?")
                            : std::string(" (did rank 0 fail? see its error)")));
  }
  if (frame.kind == Kind::kStatus && !frame.payload.empty() && frame.payload[0] != '\0') {
    fail(frame.payload.substr(1));
  }
  if (frame.kind != Kind::kBlob || frame.payload.size() != bytes) {
    fail(detail::concat("rank ", config_.rank, ": rank 0 broadcast ", frame.payload.size(),
                        " bytes where this rank expected ", bytes,
                        ": every rank must run the same ringpack build and call"));
  }
  std::memcpy(data, frame.payload.data(), bytes);
}

std::vector<std::string> Rendezvous::gather(std::string_view value) {
  check_usable();
  if (config_.world_size == 1) return {std::string(value)};
  const Deadline until = deadline();
  if (config_.rank != 0) {
    try {
      send_frame(peers_[0].fd, Kind::kValue, value, until);
    } catch (const IoError& error) {
      fail(detail::concat("rank ", config_.rank, ": sending to rank 0 over the rendezvous at ",
                          endpoint(), " failed: ", error.what(),
                          " (did rank 0 fail? see its error)"));
    }
    return {};
  }
  std::vector<std::string> values(size_t(config_.world_size));
  values[0] = std::string(value);
  for (int r = 1; r < config_.world_size; ++r) {
    const Peer& peer = peers_[size_t(r - 1)];
    Frame frame;
    try {
      frame = recv_frame(peer.fd, until);
    } catch (const IoError& error) {
      fail(detail::concat("rank 0: waiting for rank ", r, " (", peer.from,
                          ") at the rendezvous failed: ", error.what(),
                          error.reason == IoError::Reason::kTimeout
                              ? detail::concat(" within ", config_.timeout_seconds,
                                               " s (--comm-timeout); is rank ", r, " stuck?")
                              : detail::concat(" (did rank ", r, " fail? see its error)")));
    }
    if (frame.kind != Kind::kValue) {
      fail(detail::concat("rank 0: rank ", r,
                          " sent something other than its value to the rendezvous: every rank "
                          "must run the same ringpack build"));
    }
    values[size_t(r)] = std::move(frame.payload);
  }
  return values;
}

void Rendezvous::settle(const std::string& verdict) {
  check_usable();
  if (config_.rank == 0) {
    if (!verdict.empty()) fail(verdict);
    if (config_.world_size == 1) return;
    const Deadline until = deadline();
    for (int r = 1; r < config_.world_size; ++r) {
      const Peer& peer = peers_[size_t(r - 1)];
      try {
        send_frame(peer.fd, Kind::kStatus, status_payload({}), until);
      } catch (const IoError& error) {
        fail(detail::concat("rank 0: rank ", r, " (", peer.from, ") left the rendezvous: ",
                            error.what(), " (did it fail? see its error)"));
      }
    }
    return;
  }
  Frame frame;
  try {
    frame = recv_frame(peers_[0].fd, deadline() + kVerdictGrace);
  } catch (const IoError& error) {
    fail(detail::concat("rank ", config_.rank, ": waiting for rank 0 at the rendezvous at ",
                        endpoint(), " failed: ", error.what(),
                        error.reason == IoError::Reason::kTimeout
                            ? detail::concat(" within ", config_.timeout_seconds,
                                             " s (--comm-timeout); is another rank stuck?")
                            : std::string(" (did rank 0 fail? see its error)")));
  }
  if (frame.kind != Kind::kStatus || frame.payload.empty()) {
    fail(detail::concat("rank ", config_.rank,
                        ": rank 0 sent something other than a verdict over the rendezvous: "
                        "every rank must run the same ringpack build"));
  }
  if (frame.payload[0] != '\0') fail(frame.payload.substr(1));
}

void Rendezvous::check_agree(uint64_t value, std::string_view what) {
  std::string encoded;
  put_u64(encoded, value);
  const std::vector<std::string> values = gather(encoded);
  std::string verdict;
  for (size_t r = 1; r < values.size() && verdict.empty(); ++r) {
    const uint64_t theirs = values[r].size() == 8 ? get_le(values[r].data(), 8) : ~value;
    if (theirs != value) {
      verdict = detail::concat("ranks disagree on ", what, ": rank 0 has ", hex(value), ", rank ",
                               r, " has ", hex(theirs),
                               "; every rank must run with the same inputs and options");
    }
  }
  settle(verdict);
}

// "2", "2 and 5", "2, 3 and 5"
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace ringpack
