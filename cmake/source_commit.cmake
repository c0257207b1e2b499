# Writes OUTPUT (a header defining RINGPACK_SOURCE_COMMIT) from the source tree at SOURCE_DIR, at
# build time (`cmake -P`, run by the ringpack_source_commit target on every build; the file is
# rewritten only when the commit changes, so nothing recompiles otherwise). The commit is
#  - the one `git archive` wrote into cmake/archive_commit.txt (export-subst, .gitattributes):
#    a tree unpacked from an archive names the commit it came from, whatever .git lies around;
#  - else `git describe --always --dirty --abbrev=10` of SOURCE_DIR;
#  - else "unknown".
set(commit "unknown")
file(READ "${SOURCE_DIR}/cmake/archive_commit.txt" archived)
string(STRIP "${archived}" archived)
if(NOT archived MATCHES "Format" AND NOT archived STREQUAL "")
  set(commit "${archived} (archive)")
else()
  find_package(Git QUIET)
  if(GIT_FOUND)
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" describe --always --dirty
                            --abbrev=10
                    OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE status ERROR_QUIET)
    if(status EQUAL 0 AND NOT described STREQUAL "")
      set(commit "${described}")
    endif()
  endif()
endif()
set(content "#define RINGPACK_SOURCE_COMMIT \"${commit}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" previous)
endif()
if(NOT "${previous}" STREQUAL "${content}")
  file(WRITE "${OUTPUT}" "${content}")
endif()
