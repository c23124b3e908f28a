//===- CheckpointIo.h - One rank's checkpoint round trip --------*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_BENCH_CHECKPOINTIO_H
#define MUON_TOOLS_MUON_BENCH_CHECKPOINTIO_H

namespace muon::bench {

/// `muon-bench checkpoint --dir DIR [--mib N] [--repeats R] [--json]`:
/// saves and loads N MiB of optimizer state on one rank, R times, and
/// prints the times (CheckpointIo.cpp). Returns the exit code.
int runCheckpointIo(int argc, char **argv);

} // namespace muon::bench

#endif // MUON_TOOLS_MUON_BENCH_CHECKPOINTIO_H
