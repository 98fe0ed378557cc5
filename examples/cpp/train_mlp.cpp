// Trains the seed MLP (Flatten -> Dense 128 relu -> Dense 10) with mdtrain's C++ API, saves it,
// reloads it and checks the reloaded model predicts exactly what the trained one does.
//
//   train_mlp [--images FILE --labels FILE] [--epochs N] [--batch-size N] [--samples N]
//             [--replicas N] [--model PATH] [--seed N]
//
// Without --images/--labels it trains on synthetic 28x28 "images" (10 noisy class prototypes).
// With them it reads uncompressed IDX files (the MNIST / Fashion-MNIST format: unsigned bytes,
// images (N, rows, cols), labels (N,)). --replicas N > 1 trains under a MirroredStrategy over N
// logical CPU devices. Exit status: 0 when training ran and the reload check passed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace {

struct Options {
  std::string images, labels, model_path;
  int epochs = 3;
  std::int64_t batch_size = 32;
  std::int64_t samples = 3000;
  int replicas = 1;
  std::uint64_t seed = 0;
};

struct Dataset {
  mdtrain::Tensor x;  // (N, rows, cols) float32 in [0, 1]
  mdtrain::Tensor y;  // (N,) int32 class ids
  std::int64_t size() const { return x.dim(0); }
};

[[noreturn]] void usage_error(const std::string& what) {
  throw std::invalid_argument(what +
                              "\nusage: train_mlp [--images FILE --labels FILE] [--epochs N] "
                              "[--batch-size N] [--samples N] [--replicas N] [--model PATH] [--seed N]");
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("missing value after " + arg);
      return argv[++i];
    };
    auto positive = [&](const std::string& text) {
      const long long v = std::atoll(text.c_str());
      if (v <= 0) usage_error(arg + " must be a positive integer, got '" + text + "'");
      return v;
    };
    if (arg == "--images") o.images = value();
    else if (arg == "--labels") o.labels = value();
    else if (arg == "--model") o.model_path = value();
    else if (arg == "--epochs") o.epochs = static_cast<int>(positive(value()));
    else if (arg == "--batch-size") o.batch_size = positive(value());
    else if (arg == "--samples") o.samples = positive(value());
    else if (arg == "--replicas") o.replicas = static_cast<int>(positive(value()));
    else if (arg == "--seed") o.seed = static_cast<std::uint64_t>(std::atoll(value().c_str()));
    else usage_error("unknown argument '" + arg + "'");
  }
  if (o.images.empty() != o.labels.empty()) usage_error("--images and --labels go together");
  if (o.model_path.empty()) o.model_path = (std::filesystem::temp_directory_path() / "train_mlp_example.mdt").string();
  return o;
}

// ---- data ---------------------------------------------------------------------------------------

// An IDX file of unsigned bytes: magic 0x0000 08 <ndim>, ndim big-endian uint32 sizes, the data.
std::vector<std::uint8_t> read_idx(const std::string& path, int expected_ndim, std::vector<std::int64_t>& dims) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] != expected_ndim)
    throw std::runtime_error("'" + path + "' is not an IDX file of unsigned bytes with " +
                             std::to_string(expected_ndim) + " dimensions");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(expected_ndim);
  if (bytes.size() < header) throw std::runtime_error("'" + path + "' is truncated");
  std::size_t count = 1;
  dims.clear();
  for (int d = 0; d < expected_ndim; ++d) {
    const std::uint8_t* p = bytes.data() + 4 + 4 * d;
    const std::uint32_t n =
        (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
    dims.push_back(n);
    count *= n;
  }
  if (bytes.size() - header != count)
    throw std::runtime_error("'" + path + "' holds " + std::to_string(bytes.size() - header) +
                             " bytes of data, its header says " + std::to_string(count));
  return std::vector<std::uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path) {
  std::vector<std::int64_t> idims, ldims;
  const auto pixels = read_idx(images_path, 3, idims);
  const auto labels = read_idx(labels_path, 1, ldims);
  if (idims[0] != ldims[0])
    throw std::runtime_error("images hold " + std::to_string(idims[0]) + " samples, labels " +
                             std::to_string(ldims[0]));
  Dataset d{mdtrain::Tensor({idims[0], idims[1], idims[2]}, mdtrain::DType::Float32),
            mdtrain::Tensor({ldims[0]}, mdtrain::DType::Int32)};
  for (std::size_t i = 0; i < pixels.size(); ++i) d.x.data<float>()[i] = static_cast<float>(pixels[i]) / 255.0f;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= 10)
      throw std::runtime_error("label " + std::to_string(labels[i]) + " is not a class id in [0, 10)");
    d.y.data<std::int32_t>()[i] = labels[i];
  }
  return d;
}

// Ten random 28x28 prototypes; each sample is its class's prototype plus noise, clipped to [0, 1].
Dataset synthetic(std::int64_t n, std::uint64_t seed) {
  constexpr std::int64_t kSide = 28, kPixels = kSide * kSide, kClasses = 10;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> prototypes(kClasses * kPixels);
  for (auto& p : prototypes) p = unit(rng) < 0.3f ? 0.6f : 0.0f;
  Dataset d{mdtrain::Tensor({n, kSide, kSide}, mdtrain::DType::Float32), mdtrain::Tensor({n}, mdtrain::DType::Int32)};
  for (std::int64_t i = 0; i < n; ++i) {
    const auto c = static_cast<std::int32_t>(rng() % kClasses);
    d.y.data<std::int32_t>()[i] = c;
    float* row = d.x.data<float>() + i * kPixels;
    for (std::int64_t k = 0; k < kPixels; ++k)
      row[k] = std::clamp(prototypes[c * kPixels + k] + noise(rng), 0.0f, 1.0f);
  }
  return d;
}

// Rows [begin, end) as a tensor of their own.
Dataset slice(const Dataset& d, std::int64_t begin, std::int64_t end) {
  return Dataset{d.x.rows(begin, end).clone(), d.y.rows(begin, end).clone()};
}

// ---- model --------------------------------------------------------------------------------------

std::shared_ptr<mdtrain::Strategy> make_strategy(int replicas) {
  if (replicas == 1) return std::make_shared<mdtrain::OneDeviceStrategy>();
  std::vector<mdtrain::Device> devices;
  for (int r = 0; r < replicas; ++r) devices.push_back(mdtrain::Device{mdtrain::DeviceKind::CPU, r});
  return std::make_shared<mdtrain::MirroredStrategy>(devices);
}

std::unique_ptr<mdtrain::Model> make_model(const mdtrain::Shape& image_shape, const Options& o) {
  auto model = std::make_unique<mdtrain::Model>("mlp", o.seed);
  model->add(std::make_shared<mdtrain::Flatten>("flatten"));
  mdtrain::Dense::Options hidden;
  hidden.units = 128;
  hidden.activation = "relu";
  model->add(std::make_shared<mdtrain::Dense>("dense", hidden));
  mdtrain::Dense::Options logits;
  logits.units = 10;
  model->add(std::make_shared<mdtrain::Dense>("dense_1", logits));
  model->build(image_shape);
  // Keras: model.compile(optimizer="adam",
  //                      loss=SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
  model->compile(std::make_shared<mdtrain::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true),
                 std::shared_ptr<mdtrain::Optimizer>(mdtrain::make_optimizer("adam")), {"accuracy"},
                 make_strategy(o.replicas));
  return model;
}

std::string format_logs(const mdtrain::Logs& logs) {
  std::string s;
  char buf[64];
  for (const auto& [name, value] : logs) {
    std::snprintf(buf, sizeof buf, " - %s: %.4f", name.c_str(), value);
    s += buf;
  }
  return s;
}

int run(const Options& o) {
  Dataset all = o.images.empty() ? synthetic(o.samples, o.seed + 1) : load_idx(o.images, o.labels);
  if (all.size() < 2) throw std::runtime_error("need at least 2 samples, got " + std::to_string(all.size()));
  // Hold out the last fifth to evaluate and to compare predictions after the reload.
  const std::int64_t n_train = all.size() - std::max<std::int64_t>(1, all.size() / 5);
  const Dataset train = slice(all, 0, n_train), test = slice(all, n_train, all.size());
  const mdtrain::Shape image_shape(all.x.shape().begin() + 1, all.x.shape().end());
  std::printf("data: %s, %lld train / %lld test samples of shape %s\n",
              o.images.empty() ? "synthetic" : o.images.c_str(), static_cast<long long>(train.size()),
              static_cast<long long>(test.size()), mdtrain::to_string(image_shape).c_str());

  auto model = make_model(image_shape, o);
  std::printf("model: %lld parameters, %s with %d replica(s)\n",
              static_cast<long long>(model->stack().parameter_count()), model->strategy()->name().c_str(),
              model->strategy()->num_replicas_in_sync());

  std::vector<std::int64_t> order(static_cast<std::size_t>(train.size()));
  const std::int64_t steps = (train.size() + o.batch_size - 1) / o.batch_size;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(o.seed * 1000 + static_cast<std::uint64_t>(epoch)));
    auto result = model->train_epoch(train.x, train.y, order.data(), train.size(), o.batch_size, steps, nullptr);
    if (result.first_nonfinite_step >= 0)
      throw std::runtime_error("the loss became NaN or infinite at step " +
                               std::to_string(result.first_nonfinite_step));
    std::printf("epoch %d/%d%s\n", epoch + 1, o.epochs, format_logs(result.logs).c_str());
    std::fflush(stdout);
  }
  const mdtrain::Logs test_logs = model->evaluate(test.x, test.y, o.batch_size, nullptr);
  std::printf("test%s\n", format_logs(test_logs).c_str());

  model->save(o.model_path);
  std::printf("saved: %s\n", o.model_path.c_str());
  // Reload under a strategy of the same shape, so both models cut prediction batches alike.
  auto reloaded = mdtrain::Model::load(o.model_path, make_strategy(o.replicas));
  const mdtrain::Tensor before = model->predict(test.x, o.batch_size);
  const mdtrain::Tensor after = reloaded->predict(test.x, o.batch_size);
  const bool same = before.shape() == after.shape() && std::memcmp(before.raw(), after.raw(), before.nbytes()) == 0;
  const mdtrain::Logs reloaded_logs = reloaded->evaluate(test.x, test.y, o.batch_size, nullptr);
  const bool same_metrics = reloaded_logs == test_logs;
  if (!same || !same_metrics) {
    std::printf("reload check: FAILED (predictions %s, test metrics%s)\n", same ? "identical" : "differ",
                format_logs(reloaded_logs).c_str());
    return 1;
  }
  std::printf("reload check: OK (%lld predictions identical, optimizer at step %lld)\n",
              static_cast<long long>(before.numel()), static_cast<long long>(reloaded->optimizer().iterations()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 2;
  }
}
