#include "mdtrain/core/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

// Deep enough for any real config; shallow enough that recursion (parse, copy, dump, destroy)
// can never exhaust the stack, whatever a file contains.
constexpr int kMaxDepth = 512;

const char* type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "bool";
    case Json::Type::Number: return "number";
    case Json::Type::String: return "string";
    case Json::Type::Array: return "array";
    case Json::Type::Object: return "object";
  }
  return "unknown";
}

// A short rendering of a value for error messages.
std::string preview(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

[[noreturn]] void wrong_type(const Json& j, const char* expected) {
  fail<std::invalid_argument>("[json] expected ", expected, ", got ", type_name(j.type()), " ", preview(j));
}

const Json::Array& empty_array() {
  static const Json::Array a;
  return a;
}
const Json::Object& empty_object() {
  static const Json::Object o;
  return o;
}

// ---- writing ----------------------------------------------------------------------------------
// nlohmann/json escapes strings and formats numbers; this walk only lays out containers (so the
// layout is Python's json.dumps(indent=...) and NaN/Infinity can be written, which nlohmann would
// turn into null).

using nlohmann_json = nlohmann::ordered_json;

std::string dump_with_nlohmann(const nlohmann_json& leaf) {
  try {
    // strict: a string that is not valid UTF-8 is an error, not a file Python cannot read.
    return leaf.dump(-1, ' ', false, nlohmann_json::error_handler_t::strict);
  } catch (const nlohmann_json::exception& e) {
    fail<std::invalid_argument>("[json] cannot write: ", e.what());
  }
}

void dump_string(const std::string& s, std::string& out) { out += dump_with_nlohmann(nlohmann_json(s)); }

void dump_number(double v, std::string& out) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "Infinity" : "-Infinity";
    return;
  }
  // Integral values that a double holds exactly are written as integers (Python reads them back
  // as int, as it wrote them); everything else, -0.0 included, as nlohmann's shortest round trip.
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (std::trunc(v) == v && std::fabs(v) <= kExact && !(v == 0 && std::signbit(v))) {
    out += dump_with_nlohmann(nlohmann_json(static_cast<std::int64_t>(v)));
    return;
  }
  out += dump_with_nlohmann(nlohmann_json(v));
}

void newline(std::string& out, int indent, int depth) {
  out += '\n';
  out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth), ' ');
}

void dump_value(const Json& j, std::string& out, int indent, int depth) {
  switch (j.type()) {
    case Json::Type::Null: out += "null"; return;
    case Json::Type::Bool: out += j.as_bool() ? "true" : "false"; return;
    case Json::Type::Number: dump_number(j.as_number(), out); return;
    case Json::Type::String: dump_string(j.as_string(), out); return;
    case Json::Type::Array: {
      const auto& a = j.as_array();
      if (a.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (i) out += ',';
        if (indent >= 0) newline(out, indent, depth + 1);
        dump_value(a[i], out, indent, depth + 1);
      }
      if (indent >= 0) newline(out, indent, depth);
      out += ']';
      return;
    }
    case Json::Type::Object: {
      const auto& o = j.as_object();
      if (o.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (std::size_t i = 0; i < o.size(); ++i) {
        if (i) out += ',';
        if (indent >= 0) newline(out, indent, depth + 1);
        dump_string(o[i].first, out);
        out += indent >= 0 ? ": " : ":";
        dump_value(o[i].second, out, indent, depth + 1);
      }
      if (indent >= 0) newline(out, indent, depth);
      out += '}';
      return;
    }
  }
}

// ---- reading ----------------------------------------------------------------------------------
// nlohmann/json parses (RFC 8259, UTF-8 validated, positions in its errors). Three things are ours,
// done by one scan before nlohmann runs that never changes the text's length (so nlohmann's error
// offsets stay true):
//  - Python's json writes NaN, Infinity and -Infinity, which nlohmann does not read;
//  - Python reads numbers past the double range (1e400) as +-inf, where nlohmann fails;
//  - nesting is capped, so that nothing recursive (copy, dump, destroy) can exhaust the stack.
// Each such token standing as a whole value becomes a zero of the same length, 0E0... or -0E0...,
// and its real value waits in a queue; number_float() takes it back when it meets such a zero.
// Zeros of that shape the document itself holds get an empty entry, so the queue stays in step.

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_number_char(char c) { return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

// RFC 8259 number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool is_json_number(const char* p, const char* end) {
  if (p < end && *p == '-') ++p;
  if (p == end || !is_digit(*p)) return false;
  if (*p == '0') ++p;
  else
    while (p < end && is_digit(*p)) ++p;
  if (p < end && *p == '.') {
    if (++p == end || !is_digit(*p)) return false;
    while (p < end && is_digit(*p)) ++p;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    if (++p < end && (*p == '+' || *p == '-')) ++p;
    if (p == end || !is_digit(*p)) return false;
    while (p < end && is_digit(*p)) ++p;
  }
  return p == end;
}

// The shape of a stand-in: 0E or -0E followed by zeros only.
bool is_stand_in_shape(const std::string& token) {
  std::size_t i = token.compare(0, 3, "-0E") == 0 ? 3 : token.compare(0, 2, "0E") == 0 ? 2 : std::string::npos;
  if (i == std::string::npos || i == token.size()) return false;
  for (; i < token.size(); ++i)
    if (token[i] != '0') return false;
  return true;
}

struct PreparedText {
  std::string text;                                   // the input with stand-ins
  std::deque<std::optional<double>> stand_in_values;  // per stand-in-shaped token, in document order
};

bool ends_value(const std::string& s, std::size_t at) {
  if (at >= s.size()) return true;
  char c = s[at];
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ']' || c == '}';
}

PreparedText prepare(const std::string& input) {
  PreparedText p{input, {}};
  std::string& s = p.text;
  int depth = 0;
  char previous = 0;  // last significant character outside strings (0: none yet)
  auto stand_in = [&](std::size_t at, std::size_t length, double value) {
    bool negative = s[at] == '-';
    std::string zero = negative ? "-0E" : "0E";
    zero.append(length - zero.size(), '0');
    s.replace(at, length, zero);
    p.stand_in_values.push_back(value);
  };
  auto is_whole_value = [&](std::size_t at, const char* token) {
    std::size_t n = std::strlen(token);
    return s.compare(at, n, token) == 0 && ends_value(s, at + n) &&
           (previous == 0 || previous == '[' || previous == ',' || previous == ':');
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '"') {  // skip the string; nlohmann checks its content
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      ++i;
      previous = '"';
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '[' || c == '{') {
      if (++depth > kMaxDepth)
        fail<std::invalid_argument>("[json] nesting deeper than ", kMaxDepth, " levels at offset ", i);
    } else if (c == ']' || c == '}') {
      depth = depth > 0 ? depth - 1 : 0;
    } else if (is_whole_value(i, "NaN")) {
      stand_in(i, 3, std::numeric_limits<double>::quiet_NaN());
      i += 3, previous = '0';
      continue;
    } else if (is_whole_value(i, "Infinity")) {
      stand_in(i, 8, kInf);
      i += 8, previous = '0';
      continue;
    } else if (is_whole_value(i, "-Infinity")) {
      stand_in(i, 9, -kInf);
      i += 9, previous = '0';
      continue;
    } else if (c == '-' || is_digit(c)) {
      std::size_t end = i;
      while (end < s.size() && is_number_char(s[end])) ++end;
      if (is_json_number(s.data() + i, s.data() + end)) {
        std::string token = s.substr(i, end - i);
        double v = std::strtod(token.c_str(), nullptr);
        if (std::isinf(v)) stand_in(i, end - i, v);
        else if (is_stand_in_shape(token)) p.stand_in_values.push_back(std::nullopt);
      }
      i = end, previous = '0';
      continue;
    }
    previous = c;
    ++i;
  }
  return p;
}

// Builds a Json tree from nlohmann's SAX events (no intermediate nlohmann value).
class JsonBuilder : public nlohmann::json_sax<nlohmann_json> {
 public:
  explicit JsonBuilder(std::deque<std::optional<double>>& stand_in_values) : stand_in_values_(stand_in_values) {}

  Json take() { return std::move(root_); }

  bool null() override { return add(Json()); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(static_cast<double>(v))); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(static_cast<double>(v))); }
  bool number_float(number_float_t v, const string_t& raw) override {
    if (is_stand_in_shape(raw) && !stand_in_values_.empty()) {
      std::optional<double> real = stand_in_values_.front();
      stand_in_values_.pop_front();
      if (real) return add(Json(*real));
    }
    return add(Json(v));
  }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t&) override { return false; }  // only in binary formats
  bool start_object(std::size_t) override { return open(Json::object()); }
  bool key(string_t& k) override {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // nlohmann counts the characters read, the offending one included; the offset is its index.
    fail<std::invalid_argument>("[json] ", without_exception_id(e.what()), " at offset ",
                                position > 0 ? position - 1 : 0);
  }

  // "[json.exception.parse_error.101] parse error at line 1, ..." -> "parse error at line 1, ...".
  // nlohmann quotes the bytes it last read, which may be invalid UTF-8: those are written as \xNN,
  // so the message stays valid text (Python decodes it as UTF-8).
  static std::string without_exception_id(const std::string& what) {
    std::size_t from = 0;
    if (what.rfind("[json.exception.", 0) == 0) {
      auto close = what.find("] ");
      if (close != std::string::npos) from = close + 2;
    }
    std::string out;
    for (std::size_t i = from; i < what.size(); ++i) {
      auto c = static_cast<unsigned char>(what[i]);
      if (c < 0x80) {
        out += what[i];
      } else {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02X", c);
        out += buf;
      }
    }
    return out;
  }

 private:
  struct Open {
    Json value;
    std::string key;                                  // objects: the key of the next value
    std::unordered_map<std::string, std::size_t> at;  // objects: position of each key
  };

  bool open(Json container) {
    // prepare() already rejected deeper documents; this keeps the builder safe on its own.
    if (stack_.size() >= static_cast<std::size_t>(kMaxDepth))
      fail<std::invalid_argument>("[json] nesting deeper than ", kMaxDepth, " levels");
    stack_.push_back(Open{std::move(container), {}, {}});
    return true;
  }

  bool close() {
    Json done = std::move(stack_.back().value);
    stack_.pop_back();
    return add(std::move(done));
  }

  bool add(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Open& top = stack_.back();
    if (top.value.is_array()) {
      top.value.as_array().push_back(std::move(v));
      return true;
    }
    // Duplicate keys: the last value wins (as in Python), kept at the first key's position.
    auto& members = top.value.as_object();
    auto it = top.at.find(top.key);
    if (it != top.at.end()) {
      members[it->second].second = std::move(v);
    } else {
      top.at.emplace(top.key, members.size());
      members.emplace_back(std::move(top.key), std::move(v));
    }
    return true;
  }

  std::deque<std::optional<double>>& stand_in_values_;
  std::vector<Open> stack_;
  Json root_;
};

bool numbers_equal(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

// ---- Json members -----------------------------------------------------------------------------

Json::Json(const Json& other) : type_(other.type_), bool_(other.bool_), num_(other.num_), str_(other.str_) {
  if (other.arr_) arr_ = std::make_shared<Array>(*other.arr_);
  if (other.obj_) obj_ = std::make_shared<Object>(*other.obj_);
}

Json& Json::operator=(const Json& other) {
  if (this != &other) {
    Json copy(other);
    *this = std::move(copy);
  }
  return *this;
}

bool Json::as_bool() const {
  if (type_ != Type::Bool) wrong_type(*this, "bool");
  return bool_;
}

double Json::as_number() const {
  if (type_ != Type::Number) wrong_type(*this, "number");
  return num_;
}

std::int64_t Json::as_int() const {
  if (type_ != Type::Number) wrong_type(*this, "integer");
  // 2^63 is exactly representable; every double below it in magnitude fits an int64.
  constexpr double kLimit = 9223372036854775808.0;
  if (!std::isfinite(num_) || std::trunc(num_) != num_ || num_ < -kLimit || num_ >= kLimit)
    fail<std::invalid_argument>("[json] expected integer, got ", preview(*this));
  return static_cast<std::int64_t>(num_);
}

const std::string& Json::as_string() const {
  if (type_ != Type::String) wrong_type(*this, "string");
  return str_;
}

const Json::Array& Json::as_array() const {
  if (type_ != Type::Array) wrong_type(*this, "array");
  return arr_ ? *arr_ : empty_array();
}

Json::Array& Json::as_array() {
  if (type_ != Type::Array) wrong_type(*this, "array");
  if (!arr_) arr_ = std::make_shared<Array>();  // a moved-from array
  return *arr_;
}

const Json::Object& Json::as_object() const {
  if (type_ != Type::Object) wrong_type(*this, "object");
  return obj_ ? *obj_ : empty_object();
}

Json& Json::set(const std::string& key, Json value) {
  if (type_ == Type::Null) *this = object();
  if (type_ != Type::Object) wrong_type(*this, "object");
  if (!obj_) obj_ = std::make_shared<Object>();
  for (auto& kv : *obj_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return kv.second;
    }
  }
  obj_->emplace_back(key, std::move(value));
  return obj_->back().second;
}

Json::Object& Json::as_object() {
  if (type_ != Type::Object) wrong_type(*this, "object");
  if (!obj_) obj_ = std::make_shared<Object>();  // a moved-from object
  return *obj_;
}

bool Json::contains(const std::string& key) const {
  if (type_ != Type::Object || !obj_) return false;
  for (const auto& kv : *obj_)
    if (kv.first == key) return true;
  return false;
}

const Json& Json::at(const std::string& key) const {
  for (const auto& kv : as_object())
    if (kv.first == key) return kv.second;
  std::string keys;
  for (const auto& kv : as_object()) keys += (keys.empty() ? "'" : ", '") + kv.first + "'";
  fail<std::invalid_argument>("[json] missing key '", key, "' (keys: ", keys.empty() ? std::string("none") : keys, ")");
}

Json Json::get(const std::string& key, const Json& fallback) const {
  for (const auto& kv : as_object())
    if (kv.first == key) return kv.second.is_null() ? fallback : kv.second;
  return fallback;
}

void Json::push_back(Json value) {
  if (type_ == Type::Null) *this = array();
  as_array().push_back(std::move(value));
}

std::size_t Json::size() const {
  if (type_ == Type::Array) return as_array().size();
  if (type_ == Type::Object) return as_object().size();
  wrong_type(*this, "array or object");
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_value(*this, out, indent, 0);
  return out;
}

Json Json::parse(const std::string& text) {
  // Said here, not by nlohmann, whose wording for an empty text changed in 3.12.
  if (text.find_first_not_of(" \t\n\r") == std::string::npos)
    fail<std::invalid_argument>("[json] unexpected end of input: the text holds no value at offset ", text.size());
  PreparedText prepared = prepare(text);
  JsonBuilder builder(prepared.stand_in_values);
  try {
    nlohmann_json::sax_parse(prepared.text, &builder);
  } catch (const nlohmann_json::exception& e) {  // anything nlohmann reports outside parse_error()
    fail<std::invalid_argument>("[json] ", JsonBuilder::without_exception_id(e.what()));
  }
  return builder.take();
}

bool Json::operator==(const Json& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::Null: return true;
    case Type::Bool: return bool_ == other.bool_;
    case Type::Number: return numbers_equal(num_, other.num_);
    case Type::String: return str_ == other.str_;
    case Type::Array: return as_array() == other.as_array();
    case Type::Object: {
      // Objects are unordered in JSON: equal when they hold the same keys with equal values.
      const auto& a = as_object();
      const auto& b = other.as_object();
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].first == b[i].first) {
          if (a[i].second != b[i].second) return false;
          continue;
        }
        if (!other.contains(a[i].first) || a[i].second != other.at(a[i].first)) return false;
      }
      return true;
    }
  }
  return false;
}

}  // namespace mdtrain
