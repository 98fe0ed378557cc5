#include "mdtrain/nn/initializer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <vector>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

template <class F>
void fill_each(Tensor& t, F draw) {
  if (t.dtype() == DType::Float32) {
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(draw());
  } else {
    double* p = t.data<double>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = draw();
  }
}

class Constant : public Initializer {
 public:
  Constant(std::string cls, double v) : cls_(std::move(cls)), v_(v) {}
  void fill(Tensor& t, std::int64_t, std::int64_t, Rng&) const override { t.fill(v_); }
  Json config() const override {
    Json c = Json::object();
    c.set("class_name", cls_);
    Json cfg = Json::object();
    if (cls_ == "Constant") cfg.set("value", v_);
    c.set("config", cfg);
    return c;
  }

 private:
  std::string cls_;
  double v_;
};

class RandomNormal : public Initializer {
 public:
  RandomNormal(double mean, double stddev) : mean_(mean), stddev_(stddev) {}
  void fill(Tensor& t, std::int64_t, std::int64_t, Rng& rng) const override {
    fill_each(t, [&] { return mean_ + stddev_ * rng.normal(); });
  }
  Json config() const override {
    Json cfg = Json::object();
    cfg.set("mean", mean_);
    cfg.set("stddev", stddev_);
    Json c = Json::object();
    c.set("class_name", "RandomNormal");
    c.set("config", cfg);
    return c;
  }

 private:
  double mean_, stddev_;
};

class RandomUniform : public Initializer {
 public:
  RandomUniform(double lo, double hi) : lo_(lo), hi_(hi) {}
  void fill(Tensor& t, std::int64_t, std::int64_t, Rng& rng) const override {
    fill_each(t, [&] { return lo_ + (hi_ - lo_) * rng.uniform(); });
  }
  Json config() const override {
    Json cfg = Json::object();
    cfg.set("minval", lo_);
    cfg.set("maxval", hi_);
    Json c = Json::object();
    c.set("class_name", "RandomUniform");
    c.set("config", cfg);
    return c;
  }

 private:
  double lo_, hi_;
};

// Keras's VarianceScaling: scale / n with n = fan_in, fan_out or their mean; "truncated_normal"
// redraws beyond two standard deviations and corrects the stddev for the truncation.
class VarianceScaling : public Initializer {
 public:
  VarianceScaling(std::string cls, double scale, std::string mode, std::string distribution)
      : cls_(std::move(cls)), scale_(scale), mode_(std::move(mode)), distribution_(std::move(distribution)) {}
  void fill(Tensor& t, std::int64_t fan_in, std::int64_t fan_out, Rng& rng) const override {
    double n = mode_ == "fan_in" ? fan_in : mode_ == "fan_out" ? fan_out : (fan_in + fan_out) / 2.0;
    double variance = scale_ / std::max(1.0, n);
    if (distribution_ == "uniform") {
      double limit = std::sqrt(3.0 * variance);
      fill_each(t, [&] { return -limit + 2.0 * limit * rng.uniform(); });
    } else {
      double stddev = std::sqrt(variance) / 0.87962566103423978;
      fill_each(t, [&] {
        double z;
        do z = rng.normal();
        while (std::fabs(z) > 2.0);
        return stddev * z;
      });
    }
  }
  Json config() const override {
    Json c = Json::object();
    c.set("class_name", cls_);
    c.set("config", Json::object());
    return c;
  }

 private:
  std::string cls_;
  double scale_;
  std::string mode_, distribution_;
};

// Keras's Orthogonal (the recurrent kernels' default): a normal matrix's QR factor Q, signs fixed
// by diag(R), on the tensor viewed as (rows, cols) = (first axis, the rest), times gain. Q comes
// from modified Gram-Schmidt in double over the longer side's vectors.
class Orthogonal : public Initializer {
 public:
  explicit Orthogonal(double gain) : gain_(gain) {}
  void fill(Tensor& t, std::int64_t, std::int64_t, Rng& rng) const override {
    const std::int64_t rows = t.ndim() ? t.dim(0) : 1, cols = rows ? t.numel() / rows : 0;
    // a: (n, k) with n >= k, stored column by column; Q's k columns replace a's.
    const std::int64_t n = std::max(rows, cols), k = std::min(rows, cols);
    std::vector<double> a(static_cast<std::size_t>(n * k));
    for (double& v : a) v = rng.normal();
    for (std::int64_t j = 0; j < k; ++j) {
      double* q = &a[static_cast<std::size_t>(j * n)];
      for (std::int64_t p = 0; p < j; ++p) {
        const double* e = &a[static_cast<std::size_t>(p * n)];
        double dot = 0;
        for (std::int64_t i = 0; i < n; ++i) dot += e[i] * q[i];
        for (std::int64_t i = 0; i < n; ++i) q[i] -= dot * e[i];
      }
      double norm = 0;
      for (std::int64_t i = 0; i < n; ++i) norm += q[i] * q[i];
      norm = std::sqrt(norm);
      for (std::int64_t i = 0; i < n; ++i) q[i] /= norm;  // diag(R) = norm > 0: no sign to fix
    }
    // Element (r, c) of the (rows, cols) result: Q[r][c] when rows >= cols, else Q^T.
    std::int64_t index = 0;
    fill_each(t, [&] {
      const std::int64_t r = index / cols, c = index % cols;
      ++index;
      const double q = rows >= cols ? a[static_cast<std::size_t>(c * n + r)] : a[static_cast<std::size_t>(r * n + c)];
      return gain_ * q;
    });
  }
  Json config() const override {
    Json cfg = Json::object();
    cfg.set("gain", gain_);
    cfg.set("seed", Json());
    Json c = Json::object();
    c.set("class_name", "Orthogonal");
    c.set("config", cfg);
    return c;
  }

 private:
  double gain_;
};

// An initializer given its own seed (Keras's `seed=` argument): its values come from that seed
// alone, whatever the layer's or the model's seed, and are the same at every call, as Keras's
// seeded initializers (the seed is applied, not dropped: issue 34).
class Seeded : public Initializer {
 public:
  Seeded(std::unique_ptr<Initializer> inner, std::uint64_t seed) : inner_(std::move(inner)), seed_(seed) {}
  void fill(Tensor& t, std::int64_t fan_in, std::int64_t fan_out, Rng&) const override {
    Rng own(seed_, kSeededStream);
    inner_->fill(t, fan_in, fan_out, own);
  }
  Json config() const override {
    Json c = inner_->config();
    Json cfg = c.get("config", Json::object());
    cfg.set("seed", static_cast<double>(seed_));
    c.set("config", cfg);
    return c;
  }

 private:
  static constexpr std::uint64_t kSeededStream = 0x5EED;  // apart from the layers' streams
  std::unique_ptr<Initializer> inner_;
  std::uint64_t seed_;
};

std::string canonical(const std::string& name) {
  // "GlorotUniform" and "glorot_uniform" both become "glorotuniform".
  std::string n;
  for (char c : name)
    if (c != '_') n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return n;
}

}  // namespace

static std::unique_ptr<Initializer> make_unseeded(const std::string& name, const Json& cfg);

std::unique_ptr<Initializer> make_initializer(const Json& spec) {
  std::string name;
  Json cfg = Json::object();
  if (spec.is_string()) {
    name = spec.as_string();
  } else if (spec.is_object()) {
    name = spec.at("class_name").as_string();
    cfg = spec.get("config", Json::object());
  } else {
    fail<std::invalid_argument>("[initializer] expected a name or a config object, got ", spec.dump());
  }
  auto made = make_unseeded(name, cfg);
  const Json seed = cfg.is_object() ? cfg.get("seed", Json()) : Json();
  if (seed.is_null()) return made;
  const double s = seed.is_number() ? seed.as_number() : -1.0;
  MDTRAIN_CHECK(s >= 0 && s <= static_cast<double>(kMaxSeed) && std::trunc(s) == s, std::invalid_argument,
                "[initializer] ", name, ": seed must be null or a non-negative integer below 2^53, got ", seed.dump());
  return std::make_unique<Seeded>(std::move(made), static_cast<std::uint64_t>(s));
}

static std::unique_ptr<Initializer> make_unseeded(const std::string& name, const Json& cfg) {
  auto num = [&](const char* key, double fallback) {
    return cfg.contains(key) && !cfg.at(key).is_null() ? cfg.at(key).as_number() : fallback;
  };
  std::string n = canonical(name);
  if (n == "glorotuniform") return std::make_unique<VarianceScaling>("GlorotUniform", 1.0, "fan_avg", "uniform");
  if (n == "glorotnormal") return std::make_unique<VarianceScaling>("GlorotNormal", 1.0, "fan_avg", "truncated_normal");
  if (n == "henormal") return std::make_unique<VarianceScaling>("HeNormal", 2.0, "fan_in", "truncated_normal");
  if (n == "heuniform") return std::make_unique<VarianceScaling>("HeUniform", 2.0, "fan_in", "uniform");
  if (n == "zeros") return std::make_unique<Constant>("Zeros", 0.0);
  if (n == "ones") return std::make_unique<Constant>("Ones", 1.0);
  if (n == "constant") return std::make_unique<Constant>("Constant", num("value", 0.0));
  if (n == "randomnormal") return std::make_unique<RandomNormal>(num("mean", 0.0), num("stddev", 0.05));
  if (n == "orthogonal") return std::make_unique<Orthogonal>(num("gain", 1.0));
  if (n == "randomuniform") return std::make_unique<RandomUniform>(num("minval", -0.05), num("maxval", 0.05));
  fail<std::invalid_argument>("[initializer] unknown initializer '", name,
                              "'; known: glorot_uniform, glorot_normal, he_normal, he_uniform, zeros, ones, "
                              "constant, random_normal, random_uniform, orthogonal");
}

}  // namespace mdtrain
