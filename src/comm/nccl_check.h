// RINGPACK_NCCL_CHECK and RINGPACK_NCCL_ISSUE: the NCCL members of the check family. Their
// errors name the rank, the failed call, NCCL's name for the result and NCCL's last message.
#pragma once

#include <nccl.h>

#include <string>

#include "ringpack/error.h"

namespace ringpack::detail {

// NCCL's last message (ncclGetLastError), or "" when it has none.
inline std::string nccl_last_error(ncclComm_t comm) {
  const char* text = ncclGetLastError(comm);
  return text != nullptr ? std::string(text) : std::string();
}

// "<result> (NCCL: <last message>)" for an error of `comm` (nullptr: no communicator yet).
inline std::string nccl_error_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const std::string last = nccl_last_error(comm);
  if (!last.empty()) text += " (NCCL: " + last + ")";
  return text;
}

// Returns `result` when it is ncclSuccess, or ncclInProgress and `allow_in_progress` (a call of
// a non-blocking communicator that finishes in the background); throws otherwise, naming `rank`
// (when >= 0).
inline ncclResult_t check_nccl(ncclResult_t result, bool allow_in_progress, const char* expr,
                               const char* file, int line, int rank) {
  if (result == ncclSuccess || (allow_in_progress && result == ncclInProgress)) return result;
  throw_error(expr, file, line, rank >= 0 ? concat("rank ", rank, ": ") : std::string(),
              "NCCL call ", expr, " failed: ", nccl_error_text(result, nullptr));
}

}  // namespace ringpack::detail

// Throws ringpack::Error unless expr returns ncclSuccess.
#define RINGPACK_NCCL_CHECK(expr, rank) \
  (void)::ringpack::detail::check_nccl((expr), false, #expr, __FILE__, __LINE__, (rank))

// For calls of a non-blocking communicator: returns ncclSuccess or ncclInProgress (then the
// caller polls ncclCommGetAsyncError until the call finished); throws on any other result.
#define RINGPACK_NCCL_ISSUE(expr, rank) \
  ::ringpack::detail::check_nccl((expr), true, #expr, __FILE__, __LINE__, (rank))
