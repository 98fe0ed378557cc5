// Runs on every machine (no GPU needed): checks ops/cuda/kernel_list.h against the sources, so a
// CUDA kernel cannot land without shared math (MDTRAIN_HD functions the CPU also calls) and without
// a GPU test that compares it with the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "mdtrain/ops/cuda/kernel_list.h"

namespace mdtrain {
namespace {

namespace fs = std::filesystem;

// The repository, as CMake knows it (__FILE__ may be relative, e.g. under ccache's base_dir).
fs::path repo_root() { return fs::path(MDTRAIN_SOURCE_DIR); }

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file under dir whose name ends with one of the extensions, path -> text.
std::map<std::string, std::string> sources(const fs::path& dir, const std::vector<std::string>& exts) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string p = e.path().string();
    for (const auto& ext : exts)
      if (p.size() > ext.size() && p.compare(p.size() - ext.size(), ext.size(), ext) == 0) out[p] = read(e.path());
  }
  return out;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

bool calls(const std::string& text, const std::string& qualified) {
  return std::regex_search(text, std::regex("\\b" + qualified + "\\s*[(<]"));
}

class CudaKernelList : public ::testing::Test {
 protected:
  void SetUp() override {
    root = repo_root();
    ASSERT_TRUE(fs::exists(root / "cpp/mdtrain/ops/cuda")) << "cannot find the sources under " << root;
    cuda_sources = sources(root / "cpp/mdtrain", {".cu"});
    headers = sources(root / "cpp/mdtrain", {".h"});
    for (auto& [path, text] : sources(root / "cpp/mdtrain", {".cpp"})) {
      // CPU code: everything but the CUDA backend's own host files.
      if (path.find("/ops/cuda/") != std::string::npos || path.find("/core/cuda/") != std::string::npos ||
          path.find("/distribute/nccl/") != std::string::npos)
        continue;
      cpu_sources += text;
    }
    for (auto& [path, text] : sources(root / "tests/cpp/gpu", {".cpp", ".h"})) gpu_tests += text;
  }

  fs::path root;
  std::map<std::string, std::string> cuda_sources, headers;
  std::string cpu_sources, gpu_tests;
};

TEST_F(CudaKernelList, EveryGlobalKernelIsListedAndEveryListedKernelExists) {
  ASSERT_FALSE(cuda_sources.empty()) << "no .cu files under " << root / "cpp/mdtrain";
  std::set<std::string> listed;
  for (const auto& k : cuda::kKernels) listed.insert(k.kernel);
  const std::regex global("__global__\\s+void\\s+([A-Za-z_][A-Za-z0-9_]*)\\s*\\(");
  std::set<std::string> found;
  for (const auto& [path, text] : cuda_sources) {
    for (std::sregex_iterator it(text.begin(), text.end(), global), end; it != end; ++it) {
      const std::string name = (*it)[1];
      found.insert(name);
      EXPECT_TRUE(listed.count(name)) << "CUDA kernel " << name << " in " << path
                                      << " is not in ops/cuda/kernel_list.h (its shared functors and GPU test)";
    }
  }
  for (const auto& k : cuda::kKernels) {
    const auto src = root / "cpp/mdtrain" / k.source;
    ASSERT_TRUE(cuda_sources.count(src.string())) << k.kernel << ": no file " << src;
    EXPECT_TRUE(std::regex_search(cuda_sources[src.string()],
                                  std::regex(std::string("__global__\\s+void\\s+") + k.kernel + "\\s*\\(")))
        << k.kernel << " is listed but not defined in " << k.source;
  }
}

TEST_F(CudaKernelList, EveryKernelComputesWithFunctionsTheCpuAlsoCalls) {
  std::string all_headers;
  for (const auto& [path, text] : headers) all_headers += text;
  for (const auto& k : cuda::kKernels) {
    const auto fs_ = words(k.functors);
    if (fs_.empty()) {
      EXPECT_GT(std::string(k.no_functor).size(), 0u) << k.kernel << " names no shared functor and says not why";
      continue;
    }
    EXPECT_EQ(std::string(k.no_functor), "") << k.kernel << " names functors and an exemption";
    const std::string& kernel_file = cuda_sources[(root / "cpp/mdtrain" / k.source).string()];
    for (const auto& f : fs_) {
      ASSERT_EQ(f.rfind("math::", 0), 0u) << k.kernel << ": functor " << f << " must be math::name";
      const std::string name = f.substr(6);
      EXPECT_TRUE(std::regex_search(all_headers, std::regex("MDTRAIN_HD[^;{}()]*\\b" + name + "\\s*\\(")))
          << f << " (used by " << k.kernel << ") is not an MDTRAIN_HD function in cpp/mdtrain/**/*.h";
      EXPECT_TRUE(calls(kernel_file, f)) << k.kernel << "'s file " << k.source << " does not call " << f;
      EXPECT_TRUE(calls(cpu_sources, f)) << f << " (used by " << k.kernel
                                         << ") is called by no CPU source: the GPU math is not what the CPU tests run";
    }
  }
}

TEST_F(CudaKernelList, EveryKernelHasAGpuTest) {
  ASSERT_FALSE(gpu_tests.empty()) << "no tests in " << root / "tests/cpp/gpu";
  for (const auto& k : cuda::kKernels) {
    const std::string t = k.gpu_test;
    const auto dot = t.find('.');
    ASSERT_NE(dot, std::string::npos) << k.kernel << ": gpu_test must be Suite.Name, got " << t;
    const std::regex test("TEST(_F|_P)?\\s*\\(\\s*" + t.substr(0, dot) + "\\s*,\\s*" + t.substr(dot + 1) + "\\s*\\)");
    EXPECT_TRUE(std::regex_search(gpu_tests, test)) << k.kernel << ": no test " << t << " in tests/cpp/gpu/";
  }
}

// The check itself must be able to fail: an unlisted kernel in a source is found.
TEST_F(CudaKernelList, TheScanFindsKernelsItIsShown) {
  const std::string text = "template <class T>\n__global__ void made_up_kernel(const T* x) {}\n";
  const std::regex global("__global__\\s+void\\s+([A-Za-z_][A-Za-z0-9_]*)\\s*\\(");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, global));
  EXPECT_EQ(m[1], "made_up_kernel");
  EXPECT_TRUE(calls("y = math::relu(v);", "math::relu"));
  EXPECT_FALSE(calls("y = math::relu_backward(v);", "math::relu"));
}

}  // namespace
}  // namespace mdtrain
