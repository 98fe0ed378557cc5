#pragma once
// Crash-safe file replacement: a reader sees either the old file or the complete new one, never a
// half-written file, even if the process dies or the machine loses power mid-save. Checkpoints and
// model files are written this way.
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
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);
void write_file_atomically(const std::string& path, const std::string& contents);

// The whole file as bytes. Throws std::runtime_error("[io] cannot read '<path>': <reason>").
std::string read_file(const std::string& path);

}  // namespace mdtrain
