#include "mdtrain/core/json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

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
  fail<std::invalid_argument>("[json] expected ", expected, ", got ", type_name(j.type()), " ",
                              preview(j));
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

void append_hex4(std::string& out, unsigned v) {
  static const char* digits = "0123456789abcdef";
  out += "\\u00";
  out += digits[(v >> 4) & 0xF];
  out += digits[v & 0xF];
}

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) append_hex4(out, c);
        else out += ch;  // UTF-8 passes through unchanged
    }
  }
  out += '"';
}

void dump_number(double v, std::string& out) {
  if (std::isnan(v)) { out += "NaN"; return; }
  if (std::isinf(v)) { out += v > 0 ? "Infinity" : "-Infinity"; return; }
  // Integral values that a double holds exactly print as integers (Python reads them as int);
  // -0.0 keeps its sign and its float-ness so it reads back bit for bit.
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (v == 0 && std::signbit(v)) { out += "-0.0"; return; }
  if (std::trunc(v) == v && std::fabs(v) <= kExact) {
    out += std::to_string(static_cast<std::int64_t>(v));
    return;
  }
  // Shortest text that reads back to the same double.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
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
      if (a.empty()) { out += "[]"; return; }
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
      if (o.empty()) { out += "{}"; return; }
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

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Json parse_document() {
    skip_ws();
    Json v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { error_at(what, pos_); }
  [[noreturn]] void error_at(const std::string& what, std::size_t at) const {
    fail<std::invalid_argument>("[json] ", what, " at offset ", at);
  }

  std::string describe_current() const {
    if (pos_ >= s_.size()) return "end of input";
    auto c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7F) return cat("character '", s_[pos_], "'");
    char buf[8];
    std::snprintf(buf, sizeof(buf), "0x%02X", c);
    return cat("byte ", buf);
  }
  [[noreturn]] void unexpected() const { error("unexpected " + describe_current()); }

  void skip_ws() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++pos_;
      else break;
    }
  }

  bool consume_literal(const char* lit) {
    std::size_t n = std::strlen(lit);
    if (s_.compare(pos_, n, lit) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }

  Json parse_value(int depth) {
    if (pos_ >= s_.size()) unexpected();
    switch (s_[pos_]) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return Json(parse_string());
      case 't': if (consume_literal("true")) return Json(true); break;
      case 'f': if (consume_literal("false")) return Json(false); break;
      case 'n': if (consume_literal("null")) return Json(); break;
      case 'N': if (consume_literal("NaN")) return Json(std::numeric_limits<double>::quiet_NaN()); break;
      case 'I': if (consume_literal("Infinity")) return Json(std::numeric_limits<double>::infinity()); break;
      case '-':
        if (consume_literal("-Infinity")) return Json(-std::numeric_limits<double>::infinity());
        return Json(parse_number());
      default:
        if (s_[pos_] >= '0' && s_[pos_] <= '9') return Json(parse_number());
    }
    unexpected();
  }

  Json parse_array(int depth) {
    if (depth > kMaxDepth) error(cat("nesting deeper than ", kMaxDepth, " levels"));
    ++pos_;  // '['
    Json::Array items;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Json(std::move(items));
    }
    for (;;) {
      skip_ws();
      items.push_back(parse_value(depth));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; break; }
      error("expected ',' or ']' but found " + describe_current());
    }
    return Json(std::move(items));
  }

  Json parse_object(int depth) {
    if (depth > kMaxDepth) error(cat("nesting deeper than ", kMaxDepth, " levels"));
    ++pos_;  // '{'
    Json obj = Json::object();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return obj;
    }
    // Duplicate keys: the last value wins (as in Python), kept at the first key's position.
    // The index keeps that O(n) for objects of any size.
    std::unordered_map<std::string, std::size_t> index;
    Json::Object members;
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"')
        error("expected a string key but found " + describe_current());
      std::string key = parse_string();
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') error("expected ':' but found " + describe_current());
      ++pos_;
      skip_ws();
      Json value = parse_value(depth);
      auto it = index.find(key);
      if (it != index.end()) {
        members[it->second].second = std::move(value);
      } else {
        index.emplace(key, members.size());
        members.emplace_back(std::move(key), std::move(value));
      }
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; break; }
      error("expected ',' or '}' but found " + describe_current());
    }
    obj.as_object() = std::move(members);
    return obj;
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > s_.size()) error("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else error_at("invalid hex digit in \\u escape", pos_ + i);
    }
    pos_ += 4;
    return v;
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Copies one UTF-8 encoded character, rejecting overlong forms, surrogates and values past
  // U+10FFFF, so every string we hold is valid UTF-8 (what Python's decoder demands).
  void copy_utf8_char(std::string& out) {
    std::size_t start = pos_;
    auto b0 = static_cast<unsigned char>(s_[pos_]);
    int extra;
    std::uint32_t cp;
    if (b0 < 0x80) { out += s_[pos_++]; return; }
    if ((b0 & 0xE0) == 0xC0) { extra = 1; cp = b0 & 0x1F; }
    else if ((b0 & 0xF0) == 0xE0) { extra = 2; cp = b0 & 0x0F; }
    else if ((b0 & 0xF8) == 0xF0) { extra = 3; cp = b0 & 0x07; }
    else error("invalid UTF-8 byte in string");
    if (pos_ + 1 + extra > s_.size()) error("truncated UTF-8 sequence in string");
    for (int i = 1; i <= extra; ++i) {
      auto b = static_cast<unsigned char>(s_[pos_ + i]);
      if ((b & 0xC0) != 0x80) error_at("invalid UTF-8 continuation byte in string", pos_ + i);
      cp = (cp << 6) | (b & 0x3F);
    }
    static const std::uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      error_at("invalid UTF-8 sequence in string", start);
    out.append(s_, pos_, static_cast<std::size_t>(extra) + 1);
    pos_ += static_cast<std::size_t>(extra) + 1;
  }

  std::string parse_string() {
    std::size_t open = pos_;
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) error_at("unterminated string", open);
      char c = s_[pos_];
      if (c == '"') { ++pos_; return out; }
      if (static_cast<unsigned char>(c) < 0x20) error("unescaped control character in string");
      if (c != '\\') { copy_utf8_char(out); continue; }
      std::size_t esc = pos_;
      ++pos_;
      if (pos_ >= s_.size()) error_at("unterminated string", open);
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) error_at("lone low surrogate in \\u escape", esc);
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.compare(pos_, 2, "\\u") != 0) error_at("lone high surrogate in \\u escape", esc);
            pos_ += 2;
            std::uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error_at("high surrogate not followed by a low surrogate", esc);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: error_at("invalid escape in string", esc);
      }
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  double parse_number() {
    std::size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size() || !is_digit(s_[pos_])) error("expected a digit");
    // Grammar per RFC 8259: no leading zeros, no bare '.', digits after '.' and 'e'.
    std::size_t int_begin = pos_;
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    std::size_t int_end = pos_;
    std::size_t frac_begin = pos_, frac_end = pos_;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      frac_begin = pos_;
      if (pos_ >= s_.size() || !is_digit(s_[pos_])) error("expected a digit after '.'");
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      frac_end = pos_;
    }
    bool exp_negative = false;
    std::int64_t exponent = 0;
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) exp_negative = s_[pos_++] == '-';
      if (pos_ >= s_.size() || !is_digit(s_[pos_])) error("expected a digit in exponent");
      while (pos_ < s_.size() && is_digit(s_[pos_])) {
        if (exponent < 1000000000) exponent = exponent * 10 + (s_[pos_] - '0');
        ++pos_;
      }
    }
    if (pos_ < s_.size() && is_digit(s_[pos_])) error("leading zeros are not allowed");
    double value = 0;
    const char* first = s_.data() + start;
    auto res = std::from_chars(first, s_.data() + pos_, value);
    if (res.ec == std::errc::result_out_of_range) {
      // Like Python: magnitudes past the double range become infinities, tiny ones zeros.
      // The decimal exponent of the first significant digit tells which happened.
      std::int64_t magnitude = 0;
      bool found = false;
      for (std::size_t i = int_begin; i < int_end && !found; ++i)
        if (s_[i] != '0') { magnitude = static_cast<std::int64_t>(int_end - i) - 1; found = true; }
      for (std::size_t i = frac_begin; i < frac_end && !found; ++i)
        if (s_[i] != '0') { magnitude = -static_cast<std::int64_t>(i - frac_begin) - 1; found = true; }
      magnitude += exp_negative ? -exponent : exponent;
      bool negative = s_[start] == '-';
      value = magnitude > 0 ? std::numeric_limits<double>::infinity() : 0.0;
      if (negative) value = -value;
    } else if (res.ec != std::errc() || res.ptr != s_.data() + pos_) {
      error_at("invalid number", start);
    }
    return value;
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

bool numbers_equal(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

// ---- Json members -----------------------------------------------------------------------------

Json::Json(const Json& other)
    : type_(other.type_), bool_(other.bool_), num_(other.num_), str_(other.str_) {
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
  fail<std::invalid_argument>("[json] missing key '", key, "' (keys: ",
                              keys.empty() ? std::string("none") : keys, ")");
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

Json Json::parse(const std::string& text) { return Parser(text).parse_document(); }

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
