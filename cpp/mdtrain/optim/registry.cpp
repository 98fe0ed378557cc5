#include "mdtrain/optim/registry.h"

#include <algorithm>
#include <cctype>

#include "mdtrain/core/errors.h"
#include "mdtrain/optim/adagrad.h"
#include "mdtrain/optim/adam.h"
#include "mdtrain/optim/adamw.h"
#include "mdtrain/optim/rmsprop.h"
#include "mdtrain/optim/sgd.h"

namespace mdtrain {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string known_list() {
  std::string s;
  for (const auto& n : known_optimizers()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::unique_ptr<Optimizer> from_class(const std::string& name, const Json& config, const char* hint = "") {
  const std::string key = lower(name);
  if (key == "sgd") return SGD::from_config(config);
  if (key == "adam") return Adam::from_config(config);
  if (key == "adamw") return AdamW::from_config(config);
  if (key == "rmsprop") return RMSprop::from_config(config);
  if (key == "adagrad") return Adagrad::from_config(config);
  fail<std::invalid_argument>("[optim] unknown optimizer '", name, "'; known: ", known_list(), hint);
}

}  // namespace

std::vector<std::string> known_optimizers() { return {"adagrad", "adam", "adamw", "rmsprop", "sgd"}; }

std::unique_ptr<Optimizer> make_optimizer(const std::string& name) { return from_class(name, Json::object()); }

std::unique_ptr<Optimizer> make_optimizer(const Json& config) {
  if (config.is_string()) return make_optimizer(config.as_string());
  MDTRAIN_CHECK(config.is_object(), std::invalid_argument,
                "[optim] an optimizer identifier must be a name or a config object, got ", config.dump());
  if (config.contains("class_name")) {
    const Json& cls = config.at("class_name");
    MDTRAIN_CHECK(cls.is_string(), std::invalid_argument, "[optim] 'class_name' must be a string, got ", cls.dump());
    const Json inner = config.get("config", Json::object());
    return from_class(cls.as_string(), inner);
  }
  MDTRAIN_CHECK(config.contains("name") && config.at("name").is_string(), std::invalid_argument,
                "[optim] an optimizer config needs 'class_name' (or a 'name' that is one of ", known_list(), "), got ",
                config.dump());
  return from_class(config.at("name").as_string(), config,
                    " (a config whose 'name' is not a class name needs 'class_name' and 'config')");
}

Json serialize_optimizer(const Optimizer& optimizer) {
  Json j = Json::object();
  j.set("module", "keras.optimizers");
  j.set("class_name", optimizer.class_name());
  j.set("config", optimizer.config());
  j.set("registered_name", Json());
  return j;
}

}  // namespace mdtrain
