// libFuzzer target: Model::load, i.e. the model-file reader plus everything built from the file's
// JSON (layer configs, input shape, loss, optimizer and its state, weights). Inputs get their
// checksums repaired first (fuzz_input_file.h) so mutations reach the configs. The property:
// a model comes back, or std::invalid_argument is thrown naming the file; a crash, a sanitizer
// report, any other exception, an allocation beyond -malloc_limit_mb or a hang is a finding.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "fuzz_input_file.h"
#include "mdtrain/model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string& path = mdtrain::fuzz::write_scratch_file(mdtrain::fuzz::repair_checksums(bytes));
  try {
    mdtrain::Json metadata;
    auto model = mdtrain::Model::load(path, nullptr, &metadata);
  } catch (const std::invalid_argument& e) {
    if (!std::strstr(e.what(), ("'" + path + "'").c_str())) {
      std::fprintf(stderr, "model_load_fuzzer: error does not name the file: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
