#pragma once
// The "seed" of a noise layer's Keras config (GaussianNoise, GaussianDropout, SpatialDropout):
// a whole number below 2^53 (seeds are JSON numbers in model files; core/rng.h). The Python
// layer draws one when Keras's is None; a config without one (or null) gives 0, as Dropout's.
#include <cmath>
#include <cstdint>
#include <string>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/json.h"
#include "mdtrain/core/rng.h"

namespace mdtrain {

inline std::uint64_t noise_seed_from_config(const Json& config, const std::string& layer) {
  const Json seed = config.get("seed", Json());
  if (seed.is_null()) return 0;
  const double s = seed.is_number() ? seed.as_number() : -1.0;
  MDTRAIN_CHECK(s >= 0 && s <= static_cast<double>(kMaxSeed) && std::trunc(s) == s, std::invalid_argument,
                "[layers] layer \"", layer, "\": seed must be a non-negative integer below 2^53, got ", seed.dump());
  return static_cast<std::uint64_t>(s);
}

}  // namespace mdtrain
