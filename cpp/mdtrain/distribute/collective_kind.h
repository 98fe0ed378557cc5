#pragma once
// The collectives a Communicator runs, as every backend names them in its messages
// ("all_reduce #3", "rank 1 last entered barrier #2") and records them in what ranks exchange
// or share. One list, so that the backends' messages cannot drift apart.
namespace mdtrain {

// The numeric values travel between processes (the MPI backend's headers) and are packed into
// 8 bits (the threads backend's progress words): append only, never renumber.
enum class CollectiveKind : int {
  None = 0,
  AllReduce = 1,
  Reduce = 2,
  Broadcast = 3,
  AllGather = 4,
  ReduceScatter = 5,
  Barrier = 6,
  Split = 7,
};

// "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "split";
// "nothing" for None and for values outside the list.
const char* name_of(CollectiveKind kind);

// True for the kinds whose calls carry a reduce op / a root that every rank must agree on.
bool has_reduce_op(CollectiveKind kind);
bool has_root(CollectiveKind kind);

}  // namespace mdtrain
