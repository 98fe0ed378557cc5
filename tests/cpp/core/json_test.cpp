#include "mdtrain/core/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

namespace mdtrain {
namespace {

std::uint64_t bits(double v) {
  std::uint64_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// The message of the std::invalid_argument that `f` throws; fails the test if it throws nothing.
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

std::string parse_error(const std::string& text) {
  return invalid_argument_message([&] { Json::parse(text); });
}

TEST(Json, ParsesScalars) {
  EXPECT_TRUE(Json::parse("null").is_null());
  EXPECT_TRUE(Json::parse("true").as_bool());
  EXPECT_FALSE(Json::parse("false").as_bool());
  EXPECT_EQ(Json::parse("42").as_int(), 42);
  EXPECT_EQ(Json::parse("-7").as_int(), -7);
  EXPECT_DOUBLE_EQ(Json::parse("3.25").as_number(), 3.25);
  EXPECT_DOUBLE_EQ(Json::parse("-1.5e3").as_number(), -1500.0);
  EXPECT_DOUBLE_EQ(Json::parse("2E-2").as_number(), 0.02);
  EXPECT_DOUBLE_EQ(Json::parse("1e+2").as_number(), 100.0);
  EXPECT_EQ(Json::parse("0").as_int(), 0);
  EXPECT_EQ(Json::parse("\"hi\"").as_string(), "hi");
  EXPECT_EQ(Json::parse(" \t\r\n 5 \n").as_int(), 5);
}

TEST(Json, ParsesPythonNonFiniteTokens) {
  EXPECT_TRUE(std::isnan(Json::parse("NaN").as_number()));
  EXPECT_EQ(Json::parse("Infinity").as_number(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(Json::parse("-Infinity").as_number(), -std::numeric_limits<double>::infinity());
  Json a = Json::parse("[NaN, Infinity, -Infinity]");
  EXPECT_EQ(a.dump(), "[NaN,Infinity,-Infinity]");
}

TEST(Json, PythonNonFiniteTokensOnlyAsWholeValues) {
  Json j = Json::parse(R"({"a": NaN, "b": [Infinity,-Infinity], "c":NaN})");
  EXPECT_TRUE(std::isnan(j.at("a").as_number()));
  EXPECT_EQ(j.at("b").as_array()[1].as_number(), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(j.at("c").as_number()));
  // Inside strings they are text.
  EXPECT_EQ(Json::parse(R"(["NaN", "Infinity", "x NaN"])").dump(), R"(["NaN","Infinity","x NaN"])");
  for (const char* bad : {"[NaN0]", "[1NaN]", "1Infinity", "[-NaN]", "[NaNx]", "{\"a\" NaN}", "[Infinity.5]"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(parse_error(bad).rfind("[json] ", 0), 0u);
  }
}

TEST(Json, ZerosWrittenWithExponentsStayZerosBesideNonFiniteValues) {
  // The document's own 0E0-shaped zeros keep their value next to NaN and out-of-range numbers.
  Json j = Json::parse("[0E0, NaN, -0E00, 1e400, 0E000, -Infinity, 0.0E0, -1e999]");
  const auto& a = j.as_array();
  EXPECT_EQ(bits(a[0].as_number()), bits(0.0));
  EXPECT_TRUE(std::isnan(a[1].as_number()));
  EXPECT_EQ(bits(a[2].as_number()), bits(-0.0));
  EXPECT_EQ(a[3].as_number(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(bits(a[4].as_number()), bits(0.0));
  EXPECT_EQ(a[5].as_number(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(bits(a[6].as_number()), bits(0.0));
  EXPECT_EQ(a[7].as_number(), -std::numeric_limits<double>::infinity());
}

TEST(Json, DumpRejectsInvalidUtf8) {
  std::string msg = invalid_argument_message([] { Json(std::string("a\xFF")).dump(); });
  EXPECT_EQ(msg.rfind("[json] cannot write: ", 0), 0u) << msg;
}

TEST(Json, ParsesNestedStructuresInOrder) {
  Json j = Json::parse(R"({"b": [1, {"c": null}], "a": {"x": true}, "z": []})");
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j.as_object()[0].first, "b");
  EXPECT_EQ(j.as_object()[1].first, "a");
  EXPECT_EQ(j.as_object()[2].first, "z");
  EXPECT_EQ(j.at("b").as_array()[0].as_int(), 1);
  EXPECT_TRUE(j.at("b").as_array()[1].at("c").is_null());
  EXPECT_TRUE(j.at("a").at("x").as_bool());
  EXPECT_EQ(j.at("z").size(), 0u);
  EXPECT_EQ(j.dump(), R"({"b":[1,{"c":null}],"a":{"x":true},"z":[]})");
}

TEST(Json, DuplicateKeysKeepTheLastValueLikePython) {
  Json j = Json::parse(R"({"a": 1, "b": 2, "a": 3})");
  EXPECT_EQ(j.size(), 2u);
  EXPECT_EQ(j.at("a").as_int(), 3);
  EXPECT_EQ(j.dump(), R"({"a":3,"b":2})");
}

TEST(Json, StringEscapes) {
  EXPECT_EQ(Json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(Json::parse(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  // U+1F600 as a surrogate pair (how Python's json.dumps writes it with ensure_ascii).
  EXPECT_EQ(Json::parse(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(Json::parse(R"("\u0000")").as_string(), std::string(1, '\0'));
  // Raw UTF-8 passes through.
  EXPECT_EQ(Json::parse("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"").as_string(), "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST(Json, DumpEscapesControlCharactersAndRoundTripsStrings) {
  std::string s = std::string("q\"b\\n\n\t\x01\x1f\x7f", 10) + std::string(1, '\0') + "\xC3\xA9";
  Json j(s);
  // nlohmann escapes the C0 controls and writes DEL (0x7F) as is, which JSON allows (the hand-written
  // serializer before it escaped DEL as \u007f).
  EXPECT_EQ(j.dump(), "\"q\\\"b\\\\n\\n\\t\\u0001\\u001f\x7f\\u0000\xC3\xA9\"");
  EXPECT_EQ(Json::parse(j.dump()).as_string(), s);
}

// The messages are nlohmann's; each names what is wrong and where (the hand-written parser before it
// had its own wording: "lone high surrogate", "unexpected character ']' at offset 3", ...; the
// offsets, the index of the offending character, are unchanged where both stopped at the same one).
TEST(Json, RejectsBadStrings) {
  EXPECT_NE(parse_error(R"("\ud83d")").find("U+D800..U+DBFF must be followed by U+DC00..U+DFFF"), std::string::npos);
  EXPECT_NE(parse_error(R"("\ud83dx")").find("U+D800..U+DBFF must be followed by U+DC00..U+DFFF"), std::string::npos);
  EXPECT_NE(parse_error(R"("\ude00")").find("U+DC00..U+DFFF must follow U+D800..U+DBFF"), std::string::npos);
  EXPECT_NE(parse_error(R"("\ud83d\u0041")").find("must be followed by U+DC00..U+DFFF"), std::string::npos);
  EXPECT_NE(parse_error(R"("\u12G4")").find("hex digits"), std::string::npos);
  EXPECT_NE(parse_error(R"("\u12")").find("\\u"), std::string::npos);
  EXPECT_NE(parse_error(R"("\x")").find("forbidden character after backslash"), std::string::npos);
  EXPECT_NE(parse_error("\"a\nb\"").find("control character"), std::string::npos);
  EXPECT_NE(parse_error("\"abc").find("missing closing quote"), std::string::npos);
  EXPECT_NE(parse_error("\"\xFF\"").find("UTF-8"), std::string::npos);
  EXPECT_NE(parse_error("\"\xC3\"").find("UTF-8"), std::string::npos);              // truncated
  EXPECT_NE(parse_error("\"\xC0\xAF\"").find("UTF-8"), std::string::npos);          // overlong '/'
  EXPECT_NE(parse_error("\"\xED\xA0\x80\"").find("UTF-8"), std::string::npos);      // surrogate
  EXPECT_NE(parse_error("\"\xF4\x90\x80\x80\"").find("UTF-8"), std::string::npos);  // > U+10FFFF
}

TEST(Json, ErrorMessagesAreValidText) {
  // nlohmann quotes the bytes it read last; a bad byte is shown escaped, never copied raw.
  std::string msg = parse_error("\"\xFF\"");
  EXPECT_NE(msg.find("\\xFF"), std::string::npos) << msg;
  for (char c : msg) EXPECT_LT(static_cast<unsigned char>(c), 0x80u) << msg;
}

TEST(Json, RejectsMalformedDocumentsWithOffsets) {
  auto expect = [](const std::string& text, const std::string& what, const std::string& where) {
    std::string msg = parse_error(text);
    EXPECT_EQ(msg.rfind("[json] ", 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.substr(msg.size() - where.size()), where) << msg;
  };
  expect("", "unexpected end of input", " at offset 0");
  expect("[1, 2", "unexpected end of input; expected ']'", " at offset 5");
  expect("[1,]", "unexpected ']'", " at offset 3");
  expect("{\"a\" 1}", "expected ':'", " at offset 5");
  expect("{a: 1}", "expected string literal", " at offset 1");
  expect("{\"a\":1,}", "unexpected '}'; expected string literal", " at offset 7");
  expect("1 2", "expected end of input", " at offset 2");
  expect("tru", "invalid literal", " at offset 3");
  expect("nan", "invalid literal", " at offset 1");
  expect("\x01", "invalid literal", " at offset 0");
  expect("// c\n1", "invalid literal", " at offset 0");
  expect("[1,\n 2,\n x]", "line 3, column 2", " at offset 9");
}

TEST(Json, RejectsNumbersOutsideTheGrammar) {
  for (const char* bad : {"01", "-01", "1.", ".5", "-", "+1", "1e", "1e+", "0x10", "1.e3", "-.5", "--1", "1.5.2", "Inf",
                          "-NaN", "infinity"}) {
    SCOPED_TRACE(bad);
    std::string msg = parse_error(bad);
    EXPECT_EQ(msg.rfind("[json] ", 0), 0u) << msg;
    EXPECT_NE(msg.find(" at offset "), std::string::npos) << msg;
  }
}

TEST(Json, OutOfRangeNumbersSaturateLikePython) {
  EXPECT_EQ(Json::parse("1e400").as_number(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(Json::parse("-1e400").as_number(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(Json::parse("1" + std::string(400, '0')).as_number(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(Json::parse("1" + std::string(400, '0') + "e-10").as_number(), std::numeric_limits<double>::infinity());
  Json tiny = Json::parse("1e-400");
  EXPECT_EQ(tiny.as_number(), 0.0);
  EXPECT_FALSE(std::signbit(tiny.as_number()));
  EXPECT_TRUE(std::signbit(Json::parse("-1e-400").as_number()));
  EXPECT_EQ(Json::parse("0.000000001e-400").as_number(), 0.0);
  // Subnormals are in range and exact.
  EXPECT_EQ(Json::parse("5e-324").as_number(), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(Json::parse("1e99999999999999999999").as_number(), std::numeric_limits<double>::infinity());
}

TEST(Json, DumpsIntegralDoublesAsIntegers) {
  EXPECT_EQ(Json(3.0).dump(), "3");
  EXPECT_EQ(Json(-12).dump(), "-12");
  EXPECT_EQ(Json(std::int64_t{9007199254740992}).dump(), "9007199254740992");
  EXPECT_EQ(Json(0.0).dump(), "0");
  EXPECT_EQ(Json(-0.0).dump(), "-0.0");
  EXPECT_EQ(Json(0.1).dump(), "0.1");
  EXPECT_EQ(Json(1e300).dump(), "1e+300");
  EXPECT_EQ(Json(1.5).dump(), "1.5");
  EXPECT_EQ(Json(std::uint64_t{7}).dump(), "7");
}

TEST(Json, DoublesRoundTripBitForBit) {
  std::vector<double> values = {0.1,
                                1.0 / 3.0,
                                -0.0,
                                0.0,
                                1e-7,
                                123456789.123456789,
                                9007199254740993.0,
                                1.7976931348623157e308,
                                std::numeric_limits<double>::denorm_min(),
                                std::numeric_limits<double>::min(),
                                -2.5e-310,
                                static_cast<double>(0.1f),
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity()};
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t b = rng();
    double v;
    std::memcpy(&v, &b, sizeof(v));
    if (!std::isnan(v)) values.push_back(v);
  }
  std::uniform_real_distribution<double> uni(-1000, 1000);
  for (int i = 0; i < 5000; ++i) values.push_back(uni(rng));
  for (double v : values) {
    std::string text = Json(v).dump();
    double back = Json::parse(text).as_number();
    ASSERT_EQ(bits(back), bits(v)) << text;
  }
}

TEST(Json, ShortestFormIsUsed) {
  // 17 significant digits would print 0.1 as 0.10000000000000001.
  EXPECT_EQ(Json(0.3).dump(), "0.3");
  EXPECT_EQ(Json(static_cast<double>(0.1f)).dump(), "0.10000000149011612");
  EXPECT_EQ(Json(2.5e-8).dump(), "2.5e-08");
}

TEST(Json, AsIntRejectsNonIntegers) {
  EXPECT_EQ(Json(5.0).as_int(), 5);
  EXPECT_EQ(Json(-9.007199254740992e15).as_int(), -9007199254740992);
  EXPECT_THROW(Json(2.5).as_int(), std::invalid_argument);
  EXPECT_THROW(Json(1e19).as_int(), std::invalid_argument);
  EXPECT_THROW(Json(std::nan("")).as_int(), std::invalid_argument);
  EXPECT_THROW(Json(std::numeric_limits<double>::infinity()).as_int(), std::invalid_argument);
  EXPECT_EQ(Json(-9223372036854775808.0).as_int(), std::numeric_limits<std::int64_t>::min());
}

TEST(Json, TypedAccessNamesTheExpectedType) {
  EXPECT_EQ(invalid_argument_message([] { Json("abc").as_number(); }), "[json] expected number, got string \"abc\"");
  EXPECT_EQ(invalid_argument_message([] { Json(1).as_string(); }), "[json] expected string, got number 1");
  EXPECT_THROW(Json().as_bool(), std::invalid_argument);
  EXPECT_THROW(Json(1).as_array(), std::invalid_argument);
  EXPECT_THROW(Json::array().as_object(), std::invalid_argument);
  EXPECT_THROW(Json(true).size(), std::invalid_argument);
  EXPECT_THROW(Json(1).set("a", 1), std::invalid_argument);
  EXPECT_THROW(Json("s").push_back(1), std::invalid_argument);
}

TEST(Json, ObjectAccess) {
  Json j = Json::object();
  j.set("units", 128).as_number();  // set returns the stored value
  j.set("activation", "relu");
  j.set("units", 64);  // replaces in place
  EXPECT_EQ(j.size(), 2u);
  EXPECT_EQ(j.as_object()[0].first, "units");
  EXPECT_EQ(j.at("units").as_int(), 64);
  EXPECT_TRUE(j.contains("activation"));
  EXPECT_FALSE(j.contains("bias"));
  EXPECT_FALSE(Json(3).contains("a"));
  EXPECT_EQ(invalid_argument_message([&] { j.at("bias"); }), "[json] missing key 'bias' (keys: 'units', 'activation')");
  Json fallback("zeros");
  EXPECT_EQ(j.get("bias", fallback).as_string(), "zeros");
  j.set("bias", nullptr);
  EXPECT_EQ(j.get("bias", fallback).as_string(), "zeros");  // null counts as absent
  EXPECT_EQ(j.get("activation", fallback).as_string(), "relu");
  EXPECT_THROW(Json(1).get("a", fallback), std::invalid_argument);
}

TEST(Json, NullBecomesContainerOnFirstInsert) {
  Json o;
  o.set("a", 1);
  EXPECT_TRUE(o.is_object());
  Json a;
  a.push_back(1);
  a.push_back("two");
  EXPECT_EQ(a.dump(), "[1,\"two\"]");
}

TEST(Json, CopiesAreDeep) {
  Json original = Json::parse(R"({"layers": [{"units": 1}], "name": "m"})");
  Json copy = original;
  copy.as_object()[0].second.as_array()[0].set("units", 2);
  copy.as_object()[0].second.push_back(3);
  copy.set("name", "other");
  EXPECT_EQ(original.dump(), R"({"layers":[{"units":1}],"name":"m"})");
  EXPECT_EQ(copy.dump(), R"({"layers":[{"units":2},3],"name":"other"})");

  Json assigned = Json::array();
  assigned = original;
  assigned.at("layers");  // usable
  assigned.set("name", "x");
  EXPECT_EQ(original.at("name").as_string(), "m");

  Json self = original;
  const Json& alias = self;
  self = alias;  // self-assignment keeps the value
  EXPECT_EQ(self, original);
}

TEST(Json, MovedFromContainersStayUsable) {
  Json a = Json::parse("[1,2]");
  Json b = std::move(a);
  EXPECT_EQ(b.size(), 2u);
  Json o = Json::parse("{\"k\":1}");
  Json p = std::move(o);
  EXPECT_EQ(p.at("k").as_int(), 1);
}

TEST(Json, EqualityIgnoresKeyOrderAndTreatsNaNAsEqual) {
  EXPECT_EQ(Json::parse(R"({"a":1,"b":[1,2]})"), Json::parse(R"({"b":[1,2],"a":1})"));
  EXPECT_NE(Json::parse(R"({"a":1})"), Json::parse(R"({"a":2})"));
  EXPECT_NE(Json::parse(R"({"a":1})"), Json::parse(R"({"b":1})"));
  EXPECT_NE(Json::parse(R"({"a":1})"), Json::parse(R"({"a":1,"b":1})"));
  EXPECT_NE(Json::parse("[1,2]"), Json::parse("[2,1]"));
  EXPECT_EQ(Json::parse("NaN"), Json::parse("NaN"));
  EXPECT_NE(Json(1), Json("1"));
  EXPECT_NE(Json(), Json(false));
  EXPECT_EQ(Json(0.0), Json(-0.0));
}

TEST(Json, IndentedDumpMatchesPythonLayout) {
  Json j = Json::parse(R"({"a": [1, 2], "b": {}, "c": [], "d": {"e": null}})");
  EXPECT_EQ(j.dump(2),
            "{\n"
            "  \"a\": [\n"
            "    1,\n"
            "    2\n"
            "  ],\n"
            "  \"b\": {},\n"
            "  \"c\": [],\n"
            "  \"d\": {\n"
            "    \"e\": null\n"
            "  }\n"
            "}");
  EXPECT_EQ(Json::parse(j.dump(2)), j);
  EXPECT_EQ(Json::parse(j.dump(0)), j);
}

TEST(Json, NestingIsLimitedWithoutOverflowingTheStack) {
  auto nested = [](int depth, char open, char close) {
    return std::string(static_cast<std::size_t>(depth), open) + std::string(static_cast<std::size_t>(depth), close);
  };
  EXPECT_EQ(Json::parse(nested(512, '[', ']')).size(), 1u);
  EXPECT_EQ(parse_error(nested(513, '[', ']')), "[json] nesting deeper than 512 levels at offset 512");
  std::string objects;
  for (int i = 0; i < 600; ++i) objects += "{\"a\":";
  EXPECT_NE(parse_error(objects).find("nesting deeper than 512"), std::string::npos);
  // A hostile document far deeper than any stack could recurse.
  EXPECT_NE(parse_error(std::string(1000000, '[')).find("nesting deeper"), std::string::npos);
}

TEST(Json, DeepestAllowedDocumentRoundTrips) {
  std::string text(512, '[');
  text += "1";
  text += std::string(512, ']');
  Json j = Json::parse(text);
  Json copy = j;
  EXPECT_EQ(copy.dump(), text);
  EXPECT_EQ(copy, j);
}

TEST(Json, LargeObjectsParseInLinearTime) {
  // With a linear key lookup per member this would take ~10^10 steps.
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += ",\"k5\":-1}";
  Json j = Json::parse(text);
  EXPECT_EQ(j.size(), 200000u);
  EXPECT_EQ(j.as_object()[5].second.as_int(), -1);
  EXPECT_EQ(j.as_object()[199999].second.as_int(), 199999);
}

TEST(Json, RandomDocumentsRoundTrip) {
  std::mt19937 rng(7);
  std::function<Json(int)> gen = [&](int depth) -> Json {
    int kind = static_cast<int>(rng() % (depth > 4 ? 5 : 7));
    switch (kind) {
      case 0: return Json();
      case 1: return Json(rng() % 2 == 0);
      case 2: {
        std::uint64_t b = (static_cast<std::uint64_t>(rng()) << 32) | rng();
        double v;
        std::memcpy(&v, &b, sizeof(v));
        return Json(v);
      }
      case 3: return Json(static_cast<int>(rng() % 2001) - 1000);
      case 4: {
        std::string s;
        for (unsigned i = 0, n = rng() % 8; i < n; ++i) s += static_cast<char>(rng() % 128);
        return Json(s);
      }
      case 5: {
        Json a = Json::array();
        for (unsigned i = 0, n = rng() % 5; i < n; ++i) a.push_back(gen(depth + 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (unsigned i = 0, n = rng() % 5; i < n; ++i) o.set("k" + std::to_string(rng() % 10), gen(depth + 1));
        return o;
      }
    }
  };
  for (int i = 0; i < 500; ++i) {
    Json j = gen(0);
    EXPECT_EQ(Json::parse(j.dump()), j) << j.dump();
    EXPECT_EQ(Json::parse(j.dump(1)), j) << j.dump(1);
    EXPECT_EQ(Json::parse(j.dump()).dump(), j.dump());
  }
}

TEST(Json, MalformedInputNeverCrashes) {
  // Every prefix of a valid document is either valid or a clean invalid_argument.
  std::string doc = R"({"a": [1, -2.5e-3, "x\u00e9\ud83d\ude00", true, null, NaN, -Infinity], "b": {"c": {}}})";
  for (std::size_t n = 0; n <= doc.size(); ++n) {
    try {
      Json::parse(doc.substr(0, n));
      EXPECT_TRUE(n == doc.size() || n == 0) << n;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[json] ", 0), 0u);
    }
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) {
    std::string mutated = doc;
    mutated[rng() % mutated.size()] = static_cast<char>(rng() % 256);
    try {
      Json::parse(mutated);
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[json] ", 0), 0u);
    }
  }
}

}  // namespace
}  // namespace mdtrain
