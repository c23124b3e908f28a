#!/usr/bin/env python3
"""The code-structure rules of issue 51, checked over the source tree.

  code-structure.py ROOT lengths [--limit N] [--list] DIR...
      Every function definition in the C++ and CUDA files under DIR (relative
      to ROOT) and its length in lines, from the first line of its
      declaration to its closing brace. Exits 1 when one is longer than N
      (150); --list prints every function over N and the longest ten.

  code-structure.py ROOT errors DIR...
      The error convention (docs/decisions.md, "One Status"): a fallible
      function returns muon::Status or StatusOr<T>. Exits 1 naming each
      place where an out-parameter `std::string &error` / `&why`, or a
      function returning a string whose emptiness means success, appears
      outside tests and the tools' argument parsing.

The function finder reads text, not an AST: comments, strings and
preprocessor lines are blanked, and a `{` opens a function body when what
stands before it (since the last `;`, `{` or `}`) ends in a parameter list
and qualifiers, or is a constructor's initializer list. Lambdas and local
classes count as part of the function around them.
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".cpp", ".h", ".cu", ".cuh", ".c")


def blank_comments_and_strings(text):
    """`text` with comments, string and character literals and preprocessor
    lines replaced by spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "\n":
            out.append(c)
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 40])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        if c in "\"'":
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


TYPE_OPENER = re.compile(r"\b(namespace|class|struct|union|enum)\b")
# What may follow a parameter list before the body.
QUALIFIERS = re.compile(
    r"\)\s*(?:const|volatile|noexcept(?:\s*\([^()]*\))?|override|final|mutable|&&|&|"
    r"->\s*[\w:<>,\s*&]+?|\s)*$")
CTOR_INIT = re.compile(r"\)\s*(?:noexcept\s*)?:\s*[\w:]")


def function_name(header):
    """The name before the header's outermost parameter list."""
    depth = 0
    for k in range(len(header) - 1, -1, -1):
        ch = header[k]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([\w:~]+(?:\s*operator\s*\S+)?)\s*(?:<[^()]*>)?\s*$", header[:k])
                if m and m.group(1) not in ("if", "for", "while", "switch", "catch"):
                    return m.group(1)
                # The last parameter list belongs to a lambda or a call;
                # keep looking further left.
    return None


def functions(text):
    """(name, first line, last line) of every function definition."""
    code = blank_comments_and_strings(text)
    found = []
    # Each open brace: (kind, start line of its function or None).
    stack = []
    header_start = 0
    in_function = 0
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "}" and stack and stack[-1][0] == "init":
            # The end of a member's brace initializer: the constructor's
            # header goes on.
            stack.pop()
        elif c in ";}":
            if c == "}" and stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    in_function -= 1
                    found.append((name, start, code.count("\n", 0, i) + 1))
            header_start = i + 1
        elif c == "{":
            header = code[header_start:i]
            stripped = header.strip()
            kind, name, start = "block", None, None
            if in_function:
                kind = "block"
            elif CTOR_INIT.search(stripped) and re.search(r"\w\s*$", stripped):
                # A brace initializer of a member in a constructor's
                # initializer list (`: a{1}, b{2} {`): part of the header.
                stack.append(("init", None, None))
                i += 1
                continue
            elif TYPE_OPENER.search(stripped) and "(" not in stripped:
                kind = "type"
            elif re.search(r"(^|[^=!<>])=([^=]|$)", stripped) and not re.search(r"\boperator\s*\S*=", stripped) \
                    and not CTOR_INIT.search(stripped):
                kind = "initializer"
            elif QUALIFIERS.search(stripped) or (CTOR_INIT.search(stripped) and re.search(r"[)}]\s*$", stripped)):
                kind = "function"
            if kind == "function":
                name = function_name(stripped) or "?"
                lead = len(header) - len(header.lstrip())
                start = code.count("\n", 0, header_start + lead) + 1
                in_function += 1
            stack.append((kind, start, name))
            header_start = i + 1
        i += 1
    return found


def source_files(root, dirs):
    for d in dirs:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.join(dirpath, name)


def lengths(root, dirs, limit, listing):
    every = []
    for path in source_files(root, dirs):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        rel = os.path.relpath(path, root)
        if TEST_DIRECTORY.search(rel):
            continue
        for name, first, last in functions(text):
            every.append((last - first + 1, rel, first, name))
    every.sort(reverse=True)
    over = [e for e in every if e[0] > limit]
    if listing:
        print("longest functions:")
        for length, rel, first, name in every[:10]:
            print(f"  {length:5d}  {rel}:{first}  {name}")
    for length, rel, first, name in over:
        print(f"{rel}:{first}: {name} is {length} lines (at most {limit}: split it into named phases)")
    print(f"{len(every)} functions, {len(over)} over {limit} lines")
    return 1 if over else 0


TEST_DIRECTORY = re.compile(r"(^|/)(test|tests|unittests|fuzz)/")

# The error convention's patterns. Tests and the tools' argument parsing
# (Support/CommandLine: a parse reports a usage message, not a failure of
# the program) are outside the rule.
OUT_PARAMETER = re.compile(r"std::string\s*[&*]\s*(error|err|why)\b")
STRING_VERDICT = re.compile(
    r"^\s*(?:static\s+|inline\s+)?std::string\s+(?:[\w:]*::)?"
    r"((?:check|verify|validate)\w*|\w*(?:Error|Problem))\s*\(")
ERROR_EXEMPT = re.compile(r"(^|/)(test|tests|unittests|fuzz)/|(^|/)Support/CommandLine\.(h|cpp)$")
# A string that is a message (never empty), not a verdict.
STRING_MESSAGE_NAMES = {"rankError", "dlopenError"}


def errors(root, dirs):
    bad = []
    for path in source_files(root, dirs):
        rel = os.path.relpath(path, root)
        if ERROR_EXEMPT.search(rel):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            code = blank_comments_and_strings(f.read())
        for number, line in enumerate(code.splitlines(), 1):
            if OUT_PARAMETER.search(line):
                bad.append(f"{rel}:{number}: a `std::string &error` out-parameter: return muon::Status")
            m = STRING_VERDICT.search(line)
            if m and m.group(1) not in STRING_MESSAGE_NAMES:
                bad.append(f"{rel}:{number}: {m.group(1)} returns a string whose emptiness means success: return muon::Status")
    for line in bad:
        print(line)
    print(f"{len(bad)} places against the error convention")
    return 1 if bad else 0


def main(argv):
    if len(argv) < 3 or argv[2] not in ("lengths", "errors"):
        print(__doc__, file=sys.stderr)
        return 2
    root, command, rest = argv[1], argv[2], argv[3:]
    if command == "lengths":
        limit, listing, dirs = 150, False, []
        k = 0
        while k < len(rest):
            if rest[k] == "--limit":
                limit = int(rest[k + 1])
                k += 2
                continue
            if rest[k] == "--list":
                listing = True
            else:
                dirs.append(rest[k])
            k += 1
        return lengths(root, dirs, limit, listing)
    return errors(root, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
