//===- Json.cpp - Strict JSON reading with JSON-path errors ---------------===//
#include "muon/Support/Json.h"
#include "muon/Support/Escape.h"
#include "muon/Support/Limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>

namespace muon::json {

std::string key(const std::string &path, std::string_view k) {
  return path.empty() ? std::string(k) : path + "." + std::string(k);
}

std::string index(const std::string &path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string showPath(const std::string &path) {
  return path.empty() ? "<root>" : path;
}

std::string describe(const Status &status) {
  return showPath(status.location()) + ": " + status.message();
}

namespace {

/// Walks the text for the parser and remembers the last byte it read, so
/// that the handler knows where in the text each event happens.
class TrackingIterator {
public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char *;
  using reference = const char &;

  TrackingIterator(const char *at, const char **last) : at(at), last(last) {}
  reference operator*() const {
    *last = at;
    return *at;
  }
  TrackingIterator &operator++() {
    ++at;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator before = *this;
    ++at;
    return before;
  }
  bool operator==(const TrackingIterator &o) const { return at == o.at; }
  bool operator!=(const TrackingIterator &o) const { return at != o.at; }

private:
  const char *at;
  const char **last;
};

std::string lineColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

/// Builds the document and enforces the rules that the parser leaves open.
class StrictBuilder {
public:
  StrictBuilder(std::string_view text, const char **last, Value &root,
                Status &error)
      : text(text), last(last), root(root), error(error) {}

  bool null() { return place(Value(nullptr)); }
  bool boolean(bool v) { return place(Value(v)); }
  bool number_integer(int64_t v) { return place(Value(v)); }
  bool number_unsigned(uint64_t v) {
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return tooLarge(std::to_string(v), literalOffset(std::to_string(v)));
    return place(Value(static_cast<int64_t>(v)));
  }
  bool number_float(double v, const std::string &literal) {
    size_t at = literalOffset(literal);
    // The parser hands integers beyond 64 bits over as floats.
    if (literal.find_first_of(".eE") == std::string::npos)
      return tooLarge(literal, at);
    if (v == 0 && literal.find_first_of("123456789") <
                      literal.find_first_of("eE"))
      return failAt(currentPath(true),
                    "the number " + literal +
                        " is too small for a double and would read as 0",
                    at);
    if (!std::isfinite(v))
      return failAt(currentPath(true),
                    "the number " + literal + " is too large for a double",
                    at);
    return place(Value(v));
  }
  bool string(std::string &s) {
    if (!checkText(s, "string", quoteOffset()))
      return false;
    return place(Value(std::move(s)));
  }
  bool binary(nlohmann::json::binary_t &) {
    return failAt(currentPath(true), "binary values are not JSON", lastOffset());
  }
  bool start_object(size_t) {
    if (!enter())
      return false;
    Value *v = placed(Value::object());
    frames.push_back({v, false, 0, false, {}, {}});
    return true;
  }
  bool key(std::string &k) {
    Frame &f = frames.back();
    size_t at = quoteOffset();
    f.key = k;
    f.hasKey = true;
    if (!checkText(k, "key", at))
      return false;
    auto [it, inserted] = f.keys.try_emplace(k, at);
    if (!inserted)
      return failAt(currentPath(/*withKey=*/false),
                    "key '" + k + "' is given twice (" +
                        lineColumn(text, it->second) + " and " +
                        lineColumn(text, at) + ")",
                    std::nullopt);
    slot = &(*f.value)[k];
    return true;
  }
  bool end_object() {
    frames.pop_back();
    return true;
  }
  bool start_array(size_t) {
    if (!enter())
      return false;
    Value *v = placed(Value::array());
    frames.push_back({v, true, 0, false, {}, {}});
    return true;
  }
  bool end_array() {
    frames.pop_back();
    return true;
  }
  bool parse_error(size_t position, const std::string &,
                   const nlohmann::json::exception &e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2:
    // ..." -> "parse error at line 1, column 2: ..."
    // ... "last read: '<the bytes>'": the input's bytes, escaped.
    std::string what = e.what();
    size_t close = what.find("] ");
    if (close != std::string::npos)
      what = what.substr(close + 2);
    what = escapeBytes(what);
    (void)position;
    return failAt(currentPath(true), "invalid JSON: " + what, std::nullopt);
  }

private:
  struct Frame {
    Value *value;
    bool isArray;
    size_t count; // arrays: elements so far
    bool hasKey;  // objects: a key was read and its value not yet placed
    std::string key; // objects: the key being read
    std::map<std::string, size_t> keys; // objects: key -> offset
  };

  bool enter() {
    if (static_cast<int64_t>(frames.size()) >= limits::kMaxJsonDepth)
      return failAt(currentPath(true),
                    "arrays and objects nest deeper than the limit of " +
                        std::to_string(limits::kMaxJsonDepth) + " levels",
                    lastOffset());
    return true;
  }
  /// Puts `v` where the document expects the next value; returns it.
  Value *placed(Value v) {
    if (frames.empty()) {
      root = std::move(v);
      return &root;
    }
    Frame &f = frames.back();
    if (f.isArray) {
      f.value->push_back(std::move(v));
      ++f.count;
      return &f.value->back();
    }
    f.hasKey = false;
    *slot = std::move(v);
    return slot;
  }
  bool place(Value v) {
    placed(std::move(v));
    return true;
  }
  bool checkText(const std::string &s, const char *what, size_t at) {
    for (unsigned char c : s)
      if (c < 0x20) {
        char code[8];
        std::snprintf(code, sizeof(code), "U+%04X", c);
        return failAt(currentPath(std::string(what) == "string"),
                      std::string("a ") + what +
                          " holds the control character " + code,
                      at);
      }
    return true;
  }
  bool tooLarge(const std::string &literal, size_t at) {
    return failAt(currentPath(true),
                  "the integer " + literal +
                      " is out of range (integers must fit in 64 bits)",
                  at);
  }
  size_t lastOffset() const {
    return *last ? static_cast<size_t>(*last - text.data()) : 0;
  }
  /// Offset of a number just read: the parser stops one byte past it (or
  /// at the end of the text).
  size_t literalOffset(const std::string &literal) const {
    size_t end = lastOffset();
    for (size_t e : {end, end + 1})
      if (e >= literal.size() && e <= text.size() &&
          text.substr(e - literal.size(), literal.size()) == literal)
        return e - literal.size();
    return end;
  }
  /// Offset of the opening quote of the string just read (the parser stops
  /// on its closing quote).
  size_t quoteOffset() const {
    size_t close = lastOffset();
    for (size_t i = close; i-- > 0;) {
      if (text[i] != '"')
        continue;
      size_t slashes = 0;
      while (i > slashes && text[i - 1 - slashes] == '\\')
        ++slashes;
      if (slashes % 2 == 0)
        return i;
    }
    return close;
  }
  /// The path of the value being read. Within an object, `withKey` adds the
  /// key whose value it is.
  std::string currentPath(bool withKey) const {
    std::string path;
    for (size_t i = 0; i < frames.size(); ++i) {
      const Frame &f = frames[i];
      bool innermost = i + 1 == frames.size();
      if (f.isArray) {
        // Enclosing arrays: the element holding the next frame is the last.
        path = json::index(path, innermost ? f.count : f.count - 1);
      } else if (!innermost || (withKey && f.hasKey)) {
        path = json::key(path, f.key);
      }
    }
    return path;
  }
  bool failAt(const std::string &path, const std::string &message,
              std::optional<size_t> offset) {
    if (error.ok())
      error = invalidArgument(
          offset ? message + " (" + lineColumn(text, *offset) + ")" : message,
          path);
    return false;
  }

  std::string_view text;
  const char **last;
  Value &root;
  Status &error;
  std::vector<Frame> frames;
  Value *slot = nullptr; // objects: where the current key's value goes
};

} // namespace

Status parse(std::string_view text, Value &out) {
  Status error;
  const char *last = nullptr;
  Value root;
  StrictBuilder builder(text, &last, root, error);
  TrackingIterator begin(text.data(), &last),
      end(text.data() + text.size(), &last);
  if (!Value::sax_parse(begin, end, &builder))
    return error.ok() ? invalidArgument("invalid JSON") : error;
  out = std::move(root);
  return okStatus();
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

bool Reader::fail(const std::string &path, const std::string &message) {
  if (err.ok())
    err = invalidArgument(message, path);
  return false;
}

static const char *kindName(const Value &v) {
  switch (v.type()) {
  case Value::value_t::null:
    return "null";
  case Value::value_t::object:
    return "an object";
  case Value::value_t::array:
    return "an array";
  case Value::value_t::string:
    return "a string";
  case Value::value_t::boolean:
    return "a boolean";
  case Value::value_t::number_float:
    return "a fraction";
  default:
    return "a number";
  }
}

const Value *Reader::object(const Value *v, const std::string &path) {
  if (v && v->is_object())
    return v;
  fail(path, v ? std::string("expected an object, got ") + kindName(*v)
               : "missing");
  return nullptr;
}

const Value *Reader::array(const Value *v, const std::string &path) {
  if (v && v->is_array())
    return v;
  fail(path, v ? std::string("expected an array, got ") + kindName(*v)
               : "missing");
  return nullptr;
}

std::optional<int64_t> Reader::integer(const Value *v, const std::string &path,
                                       int64_t min, int64_t max) {
  if (!v || !v->is_number_integer()) {
    fail(path, v ? std::string("expected an integer, got ") + kindName(*v)
                 : "missing");
    return std::nullopt;
  }
  int64_t i = v->get<int64_t>();
  if (i < min || i > max) {
    if (max == kMax)
      fail(path, "expected an integer >= " + std::to_string(min) + ", got " +
                     std::to_string(i));
    else
      fail(path, "expected an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got " + std::to_string(i));
    return std::nullopt;
  }
  return i;
}

std::optional<int64_t> Reader::limited(const Value *v, const std::string &path,
                                       int64_t min, int64_t limit,
                                       const std::string &what) {
  std::optional<int64_t> i = integer(v, path, min);
  if (i && *i > limit) {
    fail(path, std::to_string(*i) + " is above the limit of " +
                   limits::describe(limit) + " " + what);
    return std::nullopt;
  }
  return i;
}

std::optional<double> Reader::number(const Value *v, const std::string &path) {
  if (!v || !v->is_number()) {
    fail(path, v ? std::string("expected a number, got ") + kindName(*v)
                 : "missing");
    return std::nullopt;
  }
  return v->get<double>(); // finite: the parser refuses the rest
}

std::optional<bool> Reader::boolean(const Value *v, const std::string &path) {
  if (!v || !v->is_boolean()) {
    fail(path, v ? std::string("expected true or false, got ") + kindName(*v)
                 : "missing");
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> Reader::string(const Value *v,
                                          const std::string &path) {
  if (!v || !v->is_string()) {
    fail(path, v ? std::string("expected a string, got ") + kindName(*v)
                 : "missing");
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::optional<std::string>
Reader::oneOf(const Value *v, const std::string &path,
              const std::vector<std::string_view> &choices) {
  std::optional<std::string> s = string(v, path);
  if (!s)
    return std::nullopt;
  for (std::string_view c : choices)
    if (*s == c)
      return s;
  std::string list;
  size_t i = 0;
  for (std::string_view c : choices) {
    list += i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", ");
    list += "\"" + std::string(c) + "\"";
    ++i;
  }
  fail(path, "unknown value \"" + *s + "\"; expected " + list);
  return std::nullopt;
}

std::optional<std::vector<int64_t>>
Reader::integers(const Value *v, const std::string &path, int64_t min,
                 int64_t max) {
  const Value *a = array(v, path);
  if (!a)
    return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    std::optional<int64_t> x = integer(&(*a)[i], index(path, i), min, max);
    if (!x)
      return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

const Value *Reader::get(const Value &object, std::string_view k) {
  if (!object.is_object())
    return nullptr;
  auto it = object.find(std::string(k));
  return it == object.end() ? nullptr : &*it;
}

bool Reader::knownKeys(const Value &object, const std::string &path,
                       const std::vector<std::string_view> &allowed) {
  // nlohmann::json keeps keys sorted: the first unknown one is stable.
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end())
      continue;
    std::string list;
    for (std::string_view a : allowed)
      list += (list.empty() ? "" : ", ") + std::string(a);
    return fail(key(path, it.key()),
                "unknown key '" + it.key() + "'; expected one of " + list);
  }
  return true;
}

} // namespace muon::json
