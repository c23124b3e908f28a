//===- InputFileTest.cpp - Safe reads and escaped messages ----------------===//
//
// InputFile and readInputFile refuse what is not a regular file (a FIFO
// without blocking, a directory, /dev/zero) and files past their limit;
// escapeBytes keeps printable text and escapes everything else.
//
//===----------------------------------------------------------------------===//
#include "muon/Support/Escape.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/OutputFile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace muon;

namespace {

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE((haystack).find(needle), std::string::npos)                        \
      << "'" << (haystack) << "' lacks '" << (needle) << "'"

struct Scratch {
  std::string dir = ::testing::TempDir() + "muon-input-" +
                    std::to_string(::getpid());
  Scratch() {
    removeTree(dir);
    ::mkdir(dir.c_str(), 0700);
  }
  ~Scratch() { removeTree(dir); }
  std::string path(const std::string &name) const { return dir + "/" + name; }
};

TEST(InputFile, ReadsRegularFilesWholeAndAtOffsets) {
  Scratch scratch;
  const std::string path = scratch.path("text");
  std::ofstream(path) << "hello, file";
  StatusOr<std::string> text = readInputFile(path, 100);
  ASSERT_TRUE(text.ok()) << text.status().text();
  EXPECT_EQ(*text, "hello, file");
  InputFile file;
  Status opened = file.open(path);
  ASSERT_TRUE(opened.ok()) << opened.text();
  EXPECT_EQ(file.size(), 11);
  char five[5];
  // A file shorter than asked for is damaged, not unavailable.
  Status past = file.readAt(five, 5, 7);
  EXPECT_EQ(past.code(), StatusCode::DataLoss);
  EXPECT_CONTAINS(past.message(), "the file ends at byte 11, before 12");
  EXPECT_EQ(file.readAt(five, -1, 0).code(), StatusCode::InvalidArgument);
  Status within = file.readAt(five, 4, 7);
  ASSERT_TRUE(within.ok()) << within.text();
  EXPECT_EQ(std::string(five, 4), "file");
  EXPECT_EQ(readInputPrefix(path, 5), "hello");
  EXPECT_EQ(readInputPrefix(path, 50), "hello, file");
}

TEST(InputFile, RefusesWhatIsNotARegularFile) {
  Scratch scratch;
  const std::string fifo = scratch.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string path, kind;
  };
  for (const Case &c : {Case{fifo, "a FIFO (named pipe)"},
                        Case{scratch.dir, "a directory"},
                        Case{"/dev/zero", "a character device"}}) {
    // A FIFO without a writer would block a plain open() for ever.
    StatusOr<std::string> text = readInputFile(c.path, 100, "the input");
    EXPECT_EQ(text.status().code(), StatusCode::InvalidArgument);
    EXPECT_EQ(text.status().message(), "cannot read the input '" + c.path +
                                           "': it is " + c.kind +
                                           ", not a regular file");
    EXPECT_EQ(readInputPrefix(c.path, 8), "");
  }
  StatusOr<std::string> missing = readInputFile(scratch.path("missing"), 100);
  EXPECT_EQ(missing.status().code(), StatusCode::NotFound);
  EXPECT_CONTAINS(missing.status().message(), "No such file or directory");
  InputFile file;
  EXPECT_EQ(file.open(scratch.path("missing") + "/below").code(),
            StatusCode::NotFound);
}

TEST(InputFile, RefusesFilesPastTheLimit) {
  Scratch scratch;
  const std::string path = scratch.path("big");
  std::ofstream(path) << std::string(101, 'x');
  StatusOr<std::string> over = readInputFile(path, 100, "the input");
  EXPECT_EQ(over.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(over.status().message(),
            "cannot read the input '" + path +
                "': it is larger than the limit of 100 bytes");
  StatusOr<std::string> within = readInputFile(path, 101);
  ASSERT_TRUE(within.ok()) << within.status().text();
  EXPECT_EQ(within->size(), 101u);
}

/// The output helpers' statuses: a bad output path is InvalidArgument
/// before any work, a write that fails Unavailable with the path in front,
/// a streamed writer's own code kept, and nothing moved into place.
TEST(OutputFile, ReportsEachFailureByItsCode) {
  Scratch scratch;
  const std::string input = scratch.path("in"), out = scratch.path("out");
  std::ofstream(input) << "input";
  Status same = checkOutputs({input}, {{"-o", input}});
  EXPECT_EQ(same.code(), StatusCode::InvalidArgument);
  EXPECT_CONTAINS(same.message(), "is the same file as the input");
  EXPECT_EQ(checkOutputs({input}, {{"-o", scratch.path("no/dir/out")}})
                .code(),
            StatusCode::InvalidArgument);
  ASSERT_TRUE(checkOutputs({input}, {{"-o", out}}).ok());
  Status missing = writeOutput(scratch.path("no/dir/out"), "text");
  EXPECT_EQ(missing.code(), StatusCode::Unavailable);
  EXPECT_CONTAINS(missing.message(), "cannot write '" + scratch.path("no/dir/out"));
  StreamedOutput refusing{out, [](int, bool) {
                            return Status(StatusCode::Internal, "no bytes");
                          }};
  Status streamed = writeOutputs({{input, "replaced"}}, {refusing});
  EXPECT_EQ(streamed.code(), StatusCode::Internal);
  EXPECT_EQ(streamed.message(), "cannot write '" + out + "': no bytes");
  // All or none: the text output that was staged did not replace the input.
  StatusOr<std::string> kept = readInputFile(input, 100);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "input");
  EXPECT_EQ(::access(out.c_str(), F_OK), -1);
  ASSERT_TRUE(makeDirectories(scratch.path("a/b/c")).ok());
  EXPECT_TRUE(syncDirectory(scratch.path("a/b")).ok());
  EXPECT_EQ(syncDirectory(scratch.path("nowhere")).code(),
            StatusCode::Unavailable);
}

TEST(Escape, KeepsPrintableTextAndEscapesTheRest) {
  EXPECT_EQ(escapeBytes("plain text, 100%"), "plain text, 100%");
  // Valid UTF-8 of printable characters stays.
  EXPECT_EQ(escapeBytes("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  // Control characters, DEL, a lone continuation byte, a truncated
  // sequence, an overlong '/', a surrogate, a C1 control (CSI).
  EXPECT_EQ(escapeBytes(std::string("a\0b\x1b[31m\x7f", 9)),
            "a\\x00b\\x1b[31m\\x7f");
  EXPECT_EQ(escapeBytes("\"\xff\x80\xe2\x82"), "\"\\xff\\x80\\xe2\\x82");
  EXPECT_EQ(escapeBytes("\xc0\xaf \xed\xa0\x80 \xc2\x9b"),
            "\\xc0\\xaf \\xed\\xa0\\x80 \\xc2\\x9b");
  // Newlines only when asked; listed bytes always.
  EXPECT_EQ(escapeBytes("a\nb"), "a\\x0ab");
  EXPECT_EQ(escapeBytes("a\nb", {}, /*keepNewlines=*/true), "a\nb");
  EXPECT_EQ(escapeBytes("M\"\\N", "\"\\"), "M\\x22\\x5cN");
  // Escaping printable text again changes nothing.
  std::string once = escapeBytes("x\xff\x01y");
  EXPECT_EQ(escapeBytes(once), once);
}

} // namespace
