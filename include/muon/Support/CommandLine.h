//===- CommandLine.h - Flags of the tools that run without LLVM -*- C++ -*-===//
//
// muon-run and muon-bench must build and run where LLVM is not installed
// (a GPU machine gets the runtime only), so they cannot use llvm::cl. This
// parser takes the same spellings llvm::cl does (`--name value`,
// `--name=value`, `-name`, bare boolean flags, repeated list flags, `--` to
// end the flags) and writes the values into the caller's variables.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_COMMANDLINE_H
#define MUON_SUPPORT_COMMANDLINE_H

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace muon::cli {

class Parser {
public:
  /// `overview` opens the --help text.
  Parser(std::string tool, std::string overview);

  /// The one positional argument (an input file); `required` makes its
  /// absence an error.
  void positional(std::string &value, std::string valueName, bool required);
  /// A boolean: `--name`, `--name=true` or `--name=false`.
  void flag(const std::string &name, bool &value, std::string help);
  void option(const std::string &name, std::string &value,
              std::string valueName, std::string help);
  void option(const std::string &name, int64_t &value, std::string valueName,
              std::string help);
  void option(const std::string &name, uint64_t &value, std::string valueName,
              std::string help);
  void option(const std::string &name, double &value, std::string valueName,
              std::string help);
  /// A flag that may be given several times; each value is appended.
  void list(const std::string &name, std::vector<std::string> &values,
            std::string valueName, std::string help);

  enum class Outcome { Run, Help, Error };
  /// Parses argv. Help: `--help` was given and the help text is in
  /// `message`. Error: `message` says what is wrong, naming the flag.
  Outcome parse(int argc, char **argv, std::string &message);

  /// Whether `name` was on the command line (defaults are not "given").
  bool given(const std::string &name) const { return seen.count(name) > 0; }
  std::string help() const;

private:
  enum class Kind { Bool, String, Int, UInt, Double, List };
  struct Option {
    std::string name, valueName, help;
    Kind kind;
    void *target;
  };
  const Option *find(const std::string &name) const;
  bool assign(const Option &option, const std::string &text,
              std::string &message);

  std::string tool, overview;
  std::vector<Option> options;
  std::string *input = nullptr;
  std::string inputName;
  bool inputRequired = false;
  std::set<std::string> seen;
};

} // namespace muon::cli

#endif // MUON_SUPPORT_COMMANDLINE_H
