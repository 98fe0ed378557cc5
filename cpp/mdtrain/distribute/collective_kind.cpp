#include "mdtrain/distribute/collective_kind.h"

namespace mdtrain {

const char* name_of(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::Reduce: return "reduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Barrier: return "barrier";
    case CollectiveKind::Split: return "split";
    case CollectiveKind::None: break;
  }
  return "nothing";
}

bool has_reduce_op(CollectiveKind kind) {
  return kind == CollectiveKind::AllReduce || kind == CollectiveKind::Reduce || kind == CollectiveKind::ReduceScatter;
}

bool has_root(CollectiveKind kind) { return kind == CollectiveKind::Broadcast || kind == CollectiveKind::Reduce; }

}  // namespace mdtrain
