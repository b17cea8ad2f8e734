// The CPU reference backend (library llcdist_runtime_cpu): the fp32 kernels of Kernels.h behind the
// Backend interface, executed synchronously, with collectives through the run's Communicator. Its
// kernel table holds one entry per kernel op kind, registered by the kernel families
// (src/kernels/<Family>.cpp; docs/adding-an-op.md).
#pragma once

#include "llcdist/runtime/Backend.h"
#include "llcdist/runtime/KernelTable.h"
#include "llcdist/runtime/Kernels.h"

#include <memory>
#include <utility>
#include <vector>

namespace llcdist::rt {

struct CpuBackendOptions {
  int rank = 0;  // this backend's global rank
  // The run's communicator (shared by every rank's backend; must outlive the backend), or null: then
  // only single-rank groups {rank} are allowed.
  Communicator* communicator = nullptr;
  // OpenBLAS worker threads, set process-wide when the backend is created (when the linked BLAS is
  // OpenBLAS). 1 keeps GEMM results bitwise reproducible across runs and machines; 0 leaves the
  // library's setting (OPENBLAS_NUM_THREADS) alone.
  int blasThreads = 1;
};

// The CPU reference backend: kernels from Kernels.h. The default stream executes synchronously on the
// calling thread: collectives on it run through options.communicator when the call is made (the handle
// is complete at once, an error is the call's). Every created stream (createStream) is a worker
// thread with a FIFO of work items (launches, copies, host functions, event records and waits,
// communicator calls), so communication issued on it runs concurrently with the default stream; its
// handles complete when the worker has run the call, and a failed call's error is reported by
// waitCollective on the default stream and by synchronize() (never lost: a failing rank's abort of
// the communicator wakes every worker blocked in it). Communicator calls on one group (or to / from one
// peer), from any stream and from kernels, enter the communicator in this rank's issue order (each
// waits for the earlier ones of its group to finish), because members match their calls by order.
// The destructor runs the remaining items and
// joins the workers before the arena is freed. Without
// a communicator, collectives over a group of one rank (itself) complete immediately (all-reduce and
// reduce-scatter are the identity, all-gather a copy) and a group with any other rank is an
// InvalidArgument error naming the group. Kernels never communicate: a reduction a kernel needs (the
// gradient norm over shards and stages, the vocabulary-parallel softmax) is local kernels and explicit
// all_reduce ops of f64 partial sums in the plan. send / recv go through the communicator's send / recv when the call is made (a send is
// buffered, a recv returns with the data); without a communicator they are an InvalidArgument error.
std::unique_ptr<Backend> makeCpuBackend(const CpuBackendOptions& options = {});

// What a CPU kernel entry gets besides its call: nothing today (a kernel reads and writes its own
// rank's buffers only; no communicator reaches it). Kept so that a backend-wide resource (a thread
// pool, a workspace) can be added without touching every family.
struct CpuKernelContext {};
using CpuKernel = BackendKernel<CpuKernelContext>;
using CpuKernelTable = KernelTable<CpuKernel>;

// Registers `kernel(call, params, context)` for `kind`, reading the family's parameters P
// (typedKernel, KernelCall.h).
template <class P, class Fn>
void addCpuKernel(CpuKernelTable& table, schema::OpKind kind, Fn kernel) {
  table.add(kind, typedKernel<P, CpuKernelContext>(kind, std::move(kernel)));
}

// The CPU backend's kernel table, built once from the families' registrations: an entry for exactly
// the kinds with launchesKernel(kind). checkCpuKernelTable() is the start-up check (makeCpuBackend's
// backends refuse to launch when it fails; OpTableTest asserts it).
const CpuKernelTable& cpuKernelTable();
Status checkCpuKernelTable();

// Runs one KernelCall through the CPU kernel table (what CpuBackend::launch does); exposed so other
// backends can fall back to it for host-resident data and for tests. Collective, point-to-point and
// load_microbatch ops are not kernels (an error).
Status runCpuKernel(const KernelCall& call);

}  // namespace llcdist::rt
