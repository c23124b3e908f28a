//===- CommandLine.cpp - Flags of the tools that run without LLVM ---------===//
#include "muon/Support/CommandLine.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace muon::cli {

Parser::Parser(std::string tool, std::string overview)
    : tool(std::move(tool)), overview(std::move(overview)) {}

void Parser::positional(std::string &value, std::string valueName,
                        bool required) {
  input = &value;
  inputName = std::move(valueName);
  inputRequired = required;
}

void Parser::flag(const std::string &name, bool &value, std::string help) {
  options.push_back({name, "", std::move(help), Kind::Bool, &value});
}
void Parser::option(const std::string &name, std::string &value,
                    std::string valueName, std::string help) {
  options.push_back(
      {name, std::move(valueName), std::move(help), Kind::String, &value});
}
void Parser::option(const std::string &name, int64_t &value,
                    std::string valueName, std::string help) {
  options.push_back(
      {name, std::move(valueName), std::move(help), Kind::Int, &value});
}
void Parser::option(const std::string &name, uint64_t &value,
                    std::string valueName, std::string help) {
  options.push_back(
      {name, std::move(valueName), std::move(help), Kind::UInt, &value});
}
void Parser::option(const std::string &name, double &value,
                    std::string valueName, std::string help) {
  options.push_back(
      {name, std::move(valueName), std::move(help), Kind::Double, &value});
}
void Parser::list(const std::string &name, std::vector<std::string> &values,
                  std::string valueName, std::string help) {
  options.push_back(
      {name, std::move(valueName), std::move(help), Kind::List, &values});
}

const Parser::Option *Parser::find(const std::string &name) const {
  for (const Option &o : options)
    if (o.name == name)
      return &o;
  return nullptr;
}

bool Parser::assign(const Option &o, const std::string &text,
                    std::string &message) {
  const std::string flag = "--" + o.name;
  const char *begin = text.c_str();
  char *end = nullptr;
  errno = 0;
  switch (o.kind) {
  case Kind::Bool:
    if (text != "true" && text != "false") {
      message = flag + " takes no value, or =true or =false (got '" + text +
                "')";
      return false;
    }
    *static_cast<bool *>(o.target) = text == "true";
    return true;
  case Kind::String:
    *static_cast<std::string *>(o.target) = text;
    return true;
  case Kind::List:
    static_cast<std::vector<std::string> *>(o.target)->push_back(text);
    return true;
  case Kind::Int: {
    long long v = std::strtoll(begin, &end, 10);
    if (text.empty() || *end) {
      message = flag + " expects an integer, got '" + text + "'";
      return false;
    }
    if (errno == ERANGE) {
      message = flag + " '" + text + "' is out of the range of 64-bit integers";
      return false;
    }
    *static_cast<int64_t *>(o.target) = v;
    return true;
  }
  case Kind::UInt: {
    unsigned long long v = std::strtoull(begin, &end, 10);
    if (text.empty() || *end || text[0] == '-') {
      message = flag + " expects an integer >= 0, got '" + text + "'";
      return false;
    }
    if (errno == ERANGE) {
      message = flag + " '" + text + "' is out of the range of 64-bit integers";
      return false;
    }
    *static_cast<uint64_t *>(o.target) = v;
    return true;
  }
  case Kind::Double: {
    double v = std::strtod(begin, &end);
    // Overflow to inf and NaN are the caller's range checks to refuse.
    if (text.empty() || *end) {
      message = flag + " expects a number, got '" + text + "'";
      return false;
    }
    *static_cast<double *>(o.target) = v;
    return true;
  }
  }
  return false;
}

Parser::Outcome Parser::parse(int argc, char **argv, std::string &message) {
  bool flagsEnded = false;
  bool haveInput = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (flagsEnded || arg.size() < 2 || arg[0] != '-') {
      if (!input || haveInput) {
        message = "unexpected argument '" + arg + "'" +
                  (input ? " (one " + inputName + " only)" : std::string());
        return Outcome::Error;
      }
      *input = arg;
      haveInput = true;
      continue;
    }
    if (arg == "--") {
      flagsEnded = true;
      continue;
    }
    // --name, -name, --name=value.
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    size_t eq = body.find('=');
    std::string name = body.substr(0, eq);
    if (name == "help" || name == "h") {
      message = help();
      return Outcome::Help;
    }
    const Option *o = find(name);
    if (!o) {
      message = "unknown flag '" + arg + "' (see --help)";
      return Outcome::Error;
    }
    if (o->kind != Kind::List && !seen.insert(name).second) {
      message = "--" + name + " is given more than once";
      return Outcome::Error;
    }
    seen.insert(name);
    std::string value;
    if (eq != std::string::npos) {
      value = body.substr(eq + 1);
    } else if (o->kind == Kind::Bool) {
      value = "true";
    } else {
      if (i + 1 >= argc) {
        message = "--" + name + " needs a value (" + o->valueName + ")";
        return Outcome::Error;
      }
      value = argv[++i];
    }
    if (!assign(*o, value, message))
      return Outcome::Error;
  }
  if (input && inputRequired && !haveInput) {
    message = "no input: expected " + inputName + " (see --help)";
    return Outcome::Error;
  }
  return Outcome::Run;
}

/// `text` in lines of at most `width` columns, the lines after the first
/// indented by `indent`.
static std::string wrap(const std::string &text, size_t indent,
                        size_t width) {
  std::string out;
  size_t column = indent, at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos)
      end = text.size();
    std::string word = text.substr(at, end - at);
    if (column > indent && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    at = end + 1;
  }
  return out;
}

std::string Parser::help() const {
  std::string text = "OVERVIEW: " + overview + "\n\nUSAGE: " + tool +
                     " [options]" + (input ? " " + inputName : "") +
                     "\n\nOPTIONS:\n";
  for (const Option &o : options) {
    std::string left = "  --" + o.name;
    if (o.kind != Kind::Bool)
      left += " <" + o.valueName + ">";
    if (left.size() < 30)
      left.resize(30, ' ');
    else
      left += "\n" + std::string(30, ' ');
    text += left + wrap(o.help, 30, 80) + "\n";
  }
  text += "  --help                      This text\n";
  return text;
}

} // namespace muon::cli
