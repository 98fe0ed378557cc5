// libFuzzer target: the model-file reader (load_model_file), which also reads BackupAndRestore
// backups. Each input is tried as it is and with its checksums repaired (fuzz_input_file.h), so
// that mutations reach the header's JSON and the tensor table. The property: the reader either
// returns a file that saves back and reloads to the same content, or throws
// std::invalid_argument naming the file; anything else (a crash, a sanitizer report, another
// exception, an allocation beyond -malloc_limit_mb, a hang) is a finding.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "fuzz_input_file.h"
#include "mdtrain/model/model_file.h"

namespace {

using mdtrain::ModelFile;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "model_file_fuzzer: %s\n", what.c_str());
  std::abort();
}

bool same_tensors(const std::vector<mdtrain::NamedTensor>& a, const std::vector<mdtrain::NamedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto &x = a[i].value, &y = b[i].value;
    if (a[i].name != b[i].name || x.shape() != y.shape() || x.dtype() != y.dtype() ||
        (x.nbytes() && std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0))
      return false;
  }
  return true;
}

void check(const std::string& bytes) {
  const std::string& path = mdtrain::fuzz::write_scratch_file(bytes);
  ModelFile file;
  try {
    file = mdtrain::load_model_file(path);
  } catch (const std::invalid_argument& e) {
    if (std::strstr(e.what(), ("[model_file] '" + path + "'").c_str()) != e.what())
      finding(std::string("error does not start with the file: ") + e.what());
    return;
  }
  // Accepted: it must survive a round trip through the writer unchanged.
  const std::string copy = path + ".copy";
  mdtrain::save_model_file(copy, file);
  ModelFile again = mdtrain::load_model_file(copy);
  std::remove(copy.c_str());
  if (again.model.dump() != file.model.dump() || again.compile.dump() != file.compile.dump() ||
      again.metadata.dump() != file.metadata.dump() || !same_tensors(again.weights, file.weights) ||
      !same_tensors(again.optimizer_state, file.optimizer_state))
    finding("an accepted file changed in a save/load round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  check(bytes);
  std::string repaired = mdtrain::fuzz::repair_checksums(bytes);
  if (repaired != bytes) check(repaired);
  return 0;
}
