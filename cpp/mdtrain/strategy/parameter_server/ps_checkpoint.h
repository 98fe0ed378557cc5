#pragma once
// Parameter-server checkpoints hold logical pieces, not a frozen shard layout: each server writes
// one file "<dir>/ps-<server>-of-<num_servers>.piece" holding, per variable it owns, the variable's
// name and full shape, the row range [begin, end) of the piece, those rows of the value and of each
// optimizer slot. read_ps_checkpoint assembles whole (unsharded) variables from every piece file
// in a directory, whatever layout wrote them, so k servers can save and k' servers (or one
// process) load. Files are written atomically (core/atomic_file.h).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mdtrain/core/tensor.h"
#include "mdtrain/strategy/parameter_server/shard_layout.h"

namespace mdtrain {

struct PsPiece {
  std::string variable;
  Shape shape;  // the logical variable's shape
  RowRange rows;
  Tensor value;                                       // rows.size() rows
  std::vector<std::pair<std::string, Tensor>> slots;  // slot name ("momentum", ...) -> the same rows
};

struct PsPieceFile {
  int server = 0;
  int num_servers = 1;
  std::uint64_t version = 0;    // the server's weights version when saved
  std::int64_t iterations = 0;  // its optimizer's iterations
  std::string optimizer;        // class name, checked on load
  std::vector<PsPiece> pieces;
};

std::string ps_piece_file_name(int server, int num_servers);
void write_ps_piece_file(const std::string& path, const PsPieceFile& file);
PsPieceFile read_ps_piece_file(const std::string& path);

struct PsLogicalVariable {
  std::string name;
  Tensor value;                                       // the whole variable
  std::vector<std::pair<std::string, Tensor>> slots;  // whole slots
};

struct PsCheckpoint {
  std::uint64_t version = 0;
  std::int64_t iterations = 0;
  std::string optimizer;
  std::vector<PsLogicalVariable> variables;  // in order of first appearance (server 0 first)
  const PsLogicalVariable& at(const std::string& name) const;
};

// Every *.piece file in `directory`, assembled. Throws IoError when there is none, and
// std::invalid_argument("[ps] ...") when pieces overlap, leave rows uncovered, or disagree on a
// variable's shape, dtype, slots, the optimizer or its iterations.
PsCheckpoint read_ps_checkpoint(const std::string& directory);

}  // namespace mdtrain
