#pragma once
// A small JSON value: the configuration language of layers, losses, optimizers and model files
// (one format that Python and the C++ API both read). Objects keep insertion order so files diff
// cleanly and read back identically.
//
// Parsing, string escaping and number formatting are nlohmann/json's (core/json.cpp is the only
// file that includes it: this header, and so the installed package, does not need it). The value
// itself stays this small tree so that as_array()/as_object() hand out plain vectors of Json.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mdtrain {

class Json {
 public:
  enum class Type { Null, Bool, Number, String, Array, Object };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::Bool), bool_(b) {}
  Json(int v) : type_(Type::Number), num_(v) {}
  Json(std::int64_t v) : type_(Type::Number), num_(static_cast<double>(v)) {}
  Json(std::uint64_t v) : type_(Type::Number), num_(static_cast<double>(v)) {}  // e.g. size()
  Json(double v) : type_(Type::Number), num_(v) {}
  Json(const char* s) : type_(Type::String), str_(s) {}
  Json(std::string s) : type_(Type::String), str_(std::move(s)) {}
  Json(Array a) : type_(Type::Array), arr_(std::make_shared<Array>(std::move(a))) {}
  // Copies are deep: a copied config can be edited without touching the original.
  Json(const Json& other);
  Json& operator=(const Json& other);
  Json(Json&&) noexcept = default;
  Json& operator=(Json&&) noexcept = default;

  static Json object() {
    Json j;
    j.type_ = Type::Object;
    j.obj_ = std::make_shared<Object>();
    return j;
  }
  static Json array() { return Json(Array{}); }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_object() const { return type_ == Type::Object; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_string() const { return type_ == Type::String; }
  bool is_number() const { return type_ == Type::Number; }
  bool is_bool() const { return type_ == Type::Bool; }

  // Typed access; throws std::invalid_argument("[json] ...") naming the expected type.
  bool as_bool() const;
  double as_number() const;
  std::int64_t as_int() const;  // throws if not integral
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object access. set() replaces an existing key or appends; on a null value it first turns it
  // into an empty object (and push_back turns null into an empty array).
  Json& set(const std::string& key, Json value);
  bool contains(const std::string& key) const;
  // Throws std::invalid_argument naming the missing key.
  const Json& at(const std::string& key) const;
  // Value of `key`, or `fallback` when the key is absent or null. contains() is false on a
  // non-object; at() and get() throw on one.
  // Returned by value: callers pass temporaries as fallbacks, which a reference would outlive.
  Json get(const std::string& key, const Json& fallback) const;
  void push_back(Json value);
  std::size_t size() const;  // array or object length

  // Serialise (indent < 0: compact; indent >= 0: one item per line, like Python's indent=).
  // Doubles are written by nlohmann (Grisu2) in a form that reads back bit for bit: almost
  // always Python's repr, the shortest such text, sometimes one digit longer. Integral values up
  // to 2^53 as integers, -0.0 as "-0.0"; NaN and Inf as NaN/Infinity/-Infinity like Python's json. Throws
  // std::invalid_argument("[json] cannot write: ...") on a string that is not valid UTF-8.
  std::string dump(int indent = -1) const;
  // Parses RFC 8259 JSON with nlohmann/json, plus what Python's json reads: NaN/Infinity/-Infinity,
  // and numbers past the double range as +-inf. Throws std::invalid_argument("[json] <nlohmann's
  // message> at offset N"), N the index of the offending byte. Strings must be valid UTF-8;
  // nesting is limited to 512 levels; duplicate keys keep the last value, as in Python.
  static Json parse(const std::string& text);

  // Deep equality; object key order is ignored and NaN equals NaN (so a value equals its
  // round trip through dump/parse).
  bool operator==(const Json& other) const;
  bool operator!=(const Json& other) const { return !(*this == other); }

 private:
  Type type_ = Type::Null;
  bool bool_ = false;
  double num_ = 0;
  std::string str_;
  // Pointers because Json is incomplete inside its own definition; ownership is unique in effect
  // (the copy operations clone).
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
};

}  // namespace mdtrain
