#pragma once
// Crash-safe file replacement: a reader sees either the old file or the complete new one, never a
// half-written file, even if the process dies or the machine loses power mid-save. Checkpoints and
// model files are written this way.
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace mdtrain {

// Writes `path` by calling `write` on a stream to a temporary file in the same directory
// ("<path>.tmp.<pid>.<n>"), then flushes and fsyncs it, renames it over `path` and fsyncs the
// directory. If `write` throws, or any step fails, the temporary file is removed and the
// previous file at `path` is left untouched; `write`'s exception propagates unchanged, I/O
// failures raise std::runtime_error("[io] cannot write '<path>': <reason>").
// `path` ends up a regular file: a symlink at `path` is replaced, not followed.
//
// A writer killed mid-write (SIGKILL, preemption, power loss) cannot remove its temporary, so
// before writing, temporaries of the same `path` left by dead writers are removed: those whose
// pid names no live process on this host (kill(pid, 0) fails with ESRCH), and those with this
// process's own pid that no thread of this process is writing (a previous process that had the
// same pid, as after a container restart). Temporaries of live writers are never touched.
// Limit: liveness is judged on this host, so on a file system shared between hosts (or between
// pid namespaces) a temporary being written elsewhere may be taken for a dead writer's; keep one
// writer per target path there (as BackupAndRestore does: one chief writes).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);
void write_file_atomically(const std::string& path, const std::string& contents);

// The whole file as bytes. Only regular files are read: a named pipe, device or directory at
// `path` is refused without blocking (see open_regular_file). Throws
// std::runtime_error("[io] cannot read '<path>': <reason>").
std::string read_file(const std::string& path);

// Opens `path` read-only, for readers that need a regular file. The open itself is
// non-blocking, so a named pipe with no writer (or a device) at `path` cannot hang the caller;
// then anything but a regular file is refused. On success returns the descriptor (blocking
// again, close-on-exec; the caller closes it) and sets `size`. On failure returns -1 and sets
// `why` to the reason ("No such file or directory", "it is a named pipe (FIFO), not a regular
// file", ...) and `missing` to whether the path does not exist (ENOENT or ENOTDIR).
int open_regular_file(const std::string& path, std::uint64_t& size, std::string& why, bool& missing);

}  // namespace mdtrain
