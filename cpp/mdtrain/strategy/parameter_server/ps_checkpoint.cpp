#include "mdtrain/strategy/parameter_server/ps_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "mdtrain/core/atomic_file.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/json.h"

namespace mdtrain {

namespace {

constexpr const char kMagic[] = "MDPSPIECE1\n";
constexpr std::size_t kMagicSize = sizeof(kMagic) - 1;

Json shape_json(const Shape& s) {
  Json a = Json::array();
  for (auto d : s) a.push_back(Json(static_cast<std::int64_t>(d)));
  return a;
}
Shape shape_of(const Json& j) {
  Shape s;
  for (const auto& d : j.as_array()) s.push_back(d.as_int());
  return s;
}
DType dtype_named(const std::string& name) {
  for (DType d : {DType::Float32, DType::Float64})
    if (name == name_of(d)) return d;
  fail<std::invalid_argument>("[ps] piece of unsupported dtype '", name, "'");
}
Shape piece_shape(const Shape& full, const RowRange& rows) {
  Shape s = full;
  s[0] = rows.size();
  return s;
}

}  // namespace

std::string ps_piece_file_name(int server, int num_servers) {
  return cat("ps-", server, "-of-", num_servers, ".piece");
}

void write_ps_piece_file(const std::string& path, const PsPieceFile& file) {
  Json header = Json::object();
  header.set("server", file.server);
  header.set("num_servers", file.num_servers);
  header.set("version", static_cast<std::uint64_t>(file.version));
  header.set("iterations", static_cast<std::int64_t>(file.iterations));
  header.set("optimizer", file.optimizer);
  Json pieces = Json::array();
  for (const auto& p : file.pieces) {
    Json j = Json::object();
    j.set("variable", p.variable);
    j.set("shape", shape_json(p.shape));
    j.set("dtype", std::string(name_of(p.value.dtype())));
    Json rows = Json::array();
    rows.push_back(Json(static_cast<std::int64_t>(p.rows.begin)));
    rows.push_back(Json(static_cast<std::int64_t>(p.rows.end)));
    j.set("rows", rows);
    Json slots = Json::array();
    for (const auto& s : p.slots) slots.push_back(Json(s.first));
    j.set("slots", slots);
    pieces.push_back(j);
  }
  header.set("pieces", pieces);
  const std::string text = header.dump();
  write_file_atomically(path, [&](std::ostream& os) {
    os.write(kMagic, kMagicSize);
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xFF);
    os.write(len, 8);
    os.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& p : file.pieces) {
      os.write(static_cast<const char*>(p.value.raw()), static_cast<std::streamsize>(p.value.nbytes()));
      for (const auto& s : p.slots)
        os.write(static_cast<const char*>(s.second.raw()), static_cast<std::streamsize>(s.second.nbytes()));
    }
  });
}

PsPieceFile read_ps_piece_file(const std::string& path) {
  const std::string bytes = read_file(path);
  MDTRAIN_CHECK(bytes.size() >= kMagicSize + 8 && bytes.compare(0, kMagicSize, kMagic) == 0, std::invalid_argument,
                "[ps] '", path, "' is not a parameter server piece file");
  std::uint64_t len = 0;
  for (int i = 0; i < 8; ++i)
    len |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[kMagicSize + i])) << (8 * i);
  std::size_t at = kMagicSize + 8;
  MDTRAIN_CHECK(len <= bytes.size() - at, std::invalid_argument, "[ps] '", path, "' is truncated (header)");
  const Json header = Json::parse(bytes.substr(at, len));
  at += len;
  PsPieceFile file;
  file.server = static_cast<int>(header.at("server").as_int());
  file.num_servers = static_cast<int>(header.at("num_servers").as_int());
  file.version = static_cast<std::uint64_t>(header.at("version").as_int());
  file.iterations = header.at("iterations").as_int();
  file.optimizer = header.at("optimizer").as_string();
  auto take = [&](const Shape& shape, DType dtype) {
    // Sized from the header, so checked against the bytes left before allocating: a corrupt
    // shape must not ask for more memory than the file holds.
    std::uint64_t elements = 1;
    const std::uint64_t left = bytes.size() - at;
    for (auto d : shape) {
      MDTRAIN_CHECK(d >= 0, std::invalid_argument, "[ps] '", path, "' has a negative dimension");
      if (d == 0) elements = 0;
      else if (elements) {
        MDTRAIN_CHECK(static_cast<std::uint64_t>(d) <= left / elements, std::invalid_argument, "[ps] '", path,
                      "' is truncated (data)");
        elements *= static_cast<std::uint64_t>(d);
      }
    }
    MDTRAIN_CHECK(elements <= left / size_of(dtype), std::invalid_argument, "[ps] '", path, "' is truncated (data)");
    Tensor t(shape, dtype);
    if (t.nbytes()) std::memcpy(t.raw(), bytes.data() + at, t.nbytes());
    at += t.nbytes();
    return t;
  };
  for (const auto& j : header.at("pieces").as_array()) {
    PsPiece p;
    p.variable = j.at("variable").as_string();
    p.shape = shape_of(j.at("shape"));
    const auto& rows = j.at("rows").as_array();
    MDTRAIN_CHECK(rows.size() == 2 && !p.shape.empty(), std::invalid_argument, "[ps] '", path, "': bad piece '",
                  p.variable, "'");
    p.rows = {rows[0].as_int(), rows[1].as_int()};
    MDTRAIN_CHECK(p.rows.begin >= 0 && p.rows.end >= p.rows.begin && p.rows.end <= p.shape[0], std::invalid_argument,
                  "[ps] '", path, "': piece '", p.variable, "' has rows outside the variable");
    const DType dtype = dtype_named(j.at("dtype").as_string());
    p.value = take(piece_shape(p.shape, p.rows), dtype);
    for (const auto& s : j.at("slots").as_array())
      p.slots.emplace_back(s.as_string(), take(piece_shape(p.shape, p.rows), dtype));
    file.pieces.push_back(std::move(p));
  }
  MDTRAIN_CHECK(at == bytes.size(), std::invalid_argument, "[ps] '", path, "' has trailing bytes");
  return file;
}

const PsLogicalVariable& PsCheckpoint::at(const std::string& name) const {
  for (const auto& v : variables)
    if (v.name == name) return v;
  fail<std::invalid_argument>("[ps] the checkpoint has no variable '", name, "'");
}

PsCheckpoint read_ps_checkpoint(const std::string& directory) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec))
    if (entry.path().extension() == ".piece") paths.push_back(entry.path().string());
  MDTRAIN_CHECK(!ec, IoError, "[io] cannot list '", directory, "': ", ec.message());
  MDTRAIN_CHECK(!paths.empty(), IoError, "[io] no parameter server pieces (*.piece) in '", directory, "'");
  std::sort(paths.begin(), paths.end());  // deterministic order of first appearance

  PsCheckpoint ck;
  std::map<std::string, std::vector<RowRange>> covered;
  bool first = true;
  for (const auto& path : paths) {
    PsPieceFile file = read_ps_piece_file(path);
    if (first) {
      ck.iterations = file.iterations;
      ck.optimizer = file.optimizer;
      first = false;
    }
    MDTRAIN_CHECK(file.iterations == ck.iterations && file.optimizer == ck.optimizer, std::invalid_argument,
                  "[ps] pieces in '", directory, "' come from different states (", ck.optimizer, " at iteration ",
                  ck.iterations, " vs ", file.optimizer, " at ", file.iterations, " in '", path,
                  "'): save each checkpoint into an empty directory");
    ck.version = std::max(ck.version, file.version);
    for (auto& p : file.pieces) {
      PsLogicalVariable* var = nullptr;
      for (auto& v : ck.variables)
        if (v.name == p.variable) var = &v;
      if (!var) {
        ck.variables.push_back({p.variable, Tensor::zeros(p.shape, p.value.dtype()), {}});
        var = &ck.variables.back();
        for (const auto& s : p.slots) var->slots.emplace_back(s.first, Tensor::zeros(p.shape, p.value.dtype()));
      }
      MDTRAIN_CHECK(var->value.shape() == p.shape && var->value.dtype() == p.value.dtype() &&
                        var->slots.size() == p.slots.size(),
                    std::invalid_argument, "[ps] pieces of '", p.variable, "' disagree on its shape, dtype or slots");
      for (const auto& r : covered[p.variable])
        MDTRAIN_CHECK(p.rows.end <= r.begin || p.rows.begin >= r.end || p.rows.empty(), std::invalid_argument,
                      "[ps] pieces of '", p.variable, "' overlap at rows [", std::max(r.begin, p.rows.begin), ", ",
                      std::min(r.end, p.rows.end), ") ('", path,
                      "'): a directory holds one checkpoint, save each into an empty directory");
      covered[p.variable].push_back(p.rows);
      if (p.rows.empty()) continue;
      var->value.rows(p.rows.begin, p.rows.end).copy_from(p.value);
      for (std::size_t i = 0; i < p.slots.size(); ++i) {
        MDTRAIN_CHECK(var->slots[i].first == p.slots[i].first, std::invalid_argument, "[ps] pieces of '", p.variable,
                      "' disagree on slot ", i);
        var->slots[i].second.rows(p.rows.begin, p.rows.end).copy_from(p.slots[i].second);
      }
    }
  }
  for (const auto& v : ck.variables) {
    std::int64_t rows = 0;
    for (const auto& r : covered[v.name]) rows += r.size();
    MDTRAIN_CHECK(rows == v.value.shape()[0], std::invalid_argument, "[ps] the pieces in '", directory, "' cover ",
                  rows, " of the ", v.value.shape()[0], " rows of '", v.name, "' (a server's file is missing?)");
  }
  return ck;
}

}  // namespace mdtrain
