// The MPI communicator: the ranks of a run are processes, started by mpirun or srun (one rank per
// process, or k consecutive ranks per process as threads: ranksPerProcess), behind the same
// interface and semantics as the in-process communicator (Communicator.h). Messages between two
// ranks of one process go through MPI too (to the process itself), so the results do not depend on
// how ranks are spread over processes.
// Built when MPI is found (target llcdist_runtime_mpi, LLCDIST_HAVE_MPI); the rest of the runtime
// builds without it.
//
// Every call is non-blocking underneath (MPI_Isend / MPI_Improbe + MPI_Mrecv on a duplicate of
// MPI_COMM_WORLD), polled until done, the timeout or an abort, so calls from several threads of a
// process (the queues of an asynchronous plan) progress at once (MPI_THREAD_MULTIPLE).
//
// Collectives: each member sends its request (kind, dtype, op, sizes, group) and its data to every
// other member of the group, on a tag of the group's; each member then checks that all requests
// match (else an InvalidArgument error on every member, naming both calls) and reduces the members'
// data itself, in member order, with the in-process communicator's code: every member gets the same
// bits, and the same bits as an in-process run of the plan. (O(n) messages per member and call:
// groups are the mesh axes' few members; a ring or tree for large groups is for later.) The k-th
// call of a member on a group meets the k-th call of the others (MPI orders messages of one pair
// and tag); one rank's calls on a group are serialized.
//
// Point-to-point: send copies the message (count, tag, microbatch and data) into an MPI_Isend and
// returns; recv takes the pair's oldest message and checks its triple, as in-process.
//
// Failure: a call that waits longer than the timeout fails with DeadlineExceeded naming the call, the
// group (or the peer) and the members whose messages arrived, and aborts the communicator. abort()
// fails this process's pending and later calls at once; the other processes learn of it when their
// own calls time out, unless the caller ends the job (MPI_Abort), as a launcher-level run does.
#pragma once

#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/FlightRecorder.h"
#include "llcdist/runtime/Status.h"

#include <chrono>
#include <memory>
#include <optional>

namespace llcdist::rt {

// MPI_Init_thread with MPI_THREAD_MULTIPLE, once per process (later calls return the first result);
// an error when the library provides less. MPI_Finalize runs at exit.
Status initMpi();
// This process's rank and the world size (initMpi first).
int mpiWorldRank();
int mpiWorldSize();
// Ends every process of the job (MPI_Abort): a rank that failed must not leave the others waiting.
[[noreturn]] void abortMpiJob(int exitCode);

struct MpiCommunicatorOptions {
  // Names the axis of a group in error messages ("axis dp+cp": Mesh::axisSetOfGroup); optional.
  std::optional<Mesh> mesh;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Ranks per process (--ranks-per-process): process p runs ranks [p·k, p·k + k), as threads; the
  // world is k × MPI's world size.
  int ranksPerProcess = 1;
};

// A communicator over MPI_COMM_WORLD (initMpi first): worldSize() is MPI's × ranksPerProcess, and
// every call's `rank` must be one of this process's.
StatusOr<std::unique_ptr<Communicator>> makeMpiCommunicator(const MpiCommunicatorOptions& options);

// The flight recorder's dump requests between the processes of the job (DumpPeers; initMpi first):
// on a communicator of their own, so they never mix with the run's messages.
std::unique_ptr<DumpPeers> makeMpiDumpPeers();

}  // namespace llcdist::rt
