#include "mdtrain/strategy/multi_worker_mirrored_strategy.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/hierarchical_communicator.h"
#include "mdtrain/distribute/nccl/nccl_backend.h"
#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain {

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(std::vector<Device> local_devices,
                                                         std::string local_communication, bool use_mpi)
    : Strategy(std::move(local_devices)), local_communication_(std::move(local_communication)) {
  for (const auto& d : devices())
    MDTRAIN_CHECK(d.is_cpu() == devices().front().is_cpu(), std::invalid_argument, "[multi_worker] ", d.to_string(),
                  ": a worker's replicas must all be on CPU devices or all on GPUs");
  if (!use_mpi) return;
  control_ = make_mpi_communicator();
  // A failed job must end even when a worker hangs (see mpi_end_job_on_failure).
  mpi_end_job_on_failure(true);
  num_workers_ = control_->size();
  worker_index_ = control_->rank();
  // Every worker must bring the same number of replicas: the global batch is cut evenly.
  int mine = num_local_replicas(), theirs = mine;
  control_->broadcast(&theirs, 1, DType::Int32, 0);
  int mismatch = theirs != mine ? 1 : 0;
  control_->all_reduce(&mismatch, 1, DType::Int32, ReduceOp::Max);
  MDTRAIN_CHECK(mismatch == 0, std::invalid_argument,
                "[multi_worker] every worker must have the same number of "
                "devices: worker 0 has ",
                theirs, ", worker ", worker_index_, " has ", mine,
                " (set tf.config.set_logical_device_configuration / MDTRAIN_NUM_CPU_DEVICES alike on all workers)");
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

std::unique_ptr<Communicator> MultiWorkerMirroredStrategy::make_cross_worker_communicator() const {
  if (devices().front().is_cpu()) return make_mpi_communicator();
  // GPUs: NCCL between the workers' first GPUs. Worker 0 names the group (ncclGetUniqueId) and MPI
  // carries the name to the others, which then join it (ncclCommInitRank).
  constexpr std::size_t kNcclIdBytes = 128;
  std::string id = worker_index_ == 0 ? nccl_unique_id() : std::string(kNcclIdBytes, '\0');
  MDTRAIN_CHECK(id.size() == kNcclIdBytes, std::logic_error, "[multi_worker] NCCL id of ", id.size(), " bytes");
  control_->broadcast(id.data(), id.size(), DType::UInt8, 0);
  return make_nccl_rank_communicator(id, worker_index_, num_workers_, devices().front().index);
}

std::vector<std::unique_ptr<Communicator>> MultiWorkerMirroredStrategy::make_replica_communicators() const {
  const int local = num_local_replicas();
  // Inside a worker: threads between logical CPU devices, NCCL between GPUs.
  const std::string local_backend = devices().front().is_cpu() ? local_communication_ : "nccl";
  std::vector<std::unique_ptr<Communicator>> out;
  if (num_workers_ == 1) {
    out = create_communicators(local_backend, local);
  } else if (local == 1) {
    out.push_back(make_cross_worker_communicator());  // one replica per worker: no local level
  } else {
    auto locals = create_communicators(local_backend, local);
    auto cross = make_cross_worker_communicator();
    for (int r = 0; r < local; ++r)
      out.push_back(std::make_unique<HierarchicalCommunicator>(std::move(locals[static_cast<std::size_t>(r)]),
                                                               r == 0 ? std::move(cross) : nullptr, num_workers_,
                                                               worker_index_));
  }
  for (auto& c : out) c->set_timeout(timeout_);
  return out;
}

void MultiWorkerMirroredStrategy::broadcast_from_chief(void* data, std::size_t bytes) {
  if (control_) control_->broadcast(data, bytes, DType::UInt8, 0);
}

void MultiWorkerMirroredStrategy::sum_across_workers(std::vector<double>& values) {
  if (control_) control_->all_reduce(values.data(), values.size(), DType::Float64, ReduceOp::Sum);
}

void MultiWorkerMirroredStrategy::abort(const std::string& reason) {
  if (control_) control_->abort(reason);
}

void MultiWorkerMirroredStrategy::barrier() {
  if (control_) control_->barrier();
}

void MultiWorkerMirroredStrategy::set_timeout(double seconds) {
  MDTRAIN_CHECK(seconds > 0, std::invalid_argument, "[multi_worker] timeout must be > 0 seconds, got ", seconds);
  timeout_ = seconds;
  if (control_) control_->set_timeout(seconds);
}

}  // namespace mdtrain
