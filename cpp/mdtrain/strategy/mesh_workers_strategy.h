#pragma once
// The base of strategies over a DeviceMesh that may span MPI workers (ModelParallelStrategy,
// PipelineStrategy): across workers, the world group and the host-side coordination between them
// (num_workers, worker_index, sum_across_workers, abort) are those of the strategy that joined the
// job over this worker's devices (a MultiWorkerMirroredStrategy), which this one holds; in one
// process they are trivial and the devices are the mesh's.
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

class MeshWorkersStrategy : public Strategy {
 public:
  int num_workers() const override { return workers_ ? workers_->num_workers() : 1; }
  int worker_index() const override { return workers_ ? workers_->worker_index() : 0; }
  void sum_across_workers(std::vector<double>& values) override {
    if (workers_) workers_->sum_across_workers(values);
  }
  void abort(const std::string& reason) override {
    if (workers_) workers_->abort(reason);
  }
  // The strategy that joined the MPI job (null in one process): host-side coordination between
  // workers goes through it.
  const std::shared_ptr<Strategy>& workers() const { return workers_; }
  // The model-parallel executor does not run a StepPlan yet: its plan is not written, and the
  // data-parallel default would describe another step. Throws. (PipelineStrategy and
  // WavefrontStrategy make theirs.)
  StepPlan make_plan(Network& network, const DeviceMesh& mesh, const PlanOptions& options) const override;

 protected:
  // Throws std::invalid_argument("[area] ...") for a mesh across workers without `workers`, or one
  // whose workers and devices per worker are not the job's.
  MeshWorkersStrategy(const DeviceMesh& mesh, std::shared_ptr<Strategy> workers, const char* area);
  // Throws std::invalid_argument naming the first layer whose input or output shape has unknown
  // dimensions (core/shape.h): these strategies size their stages, shards and messages once, so
  // variable-length inputs train under the data-parallel strategies only.
  void require_known_dims(const Network& network) const;
  // The world group: the joined strategy's across workers, else `local_backend` between this
  // process's devices.
  std::vector<std::unique_ptr<Communicator>> world_communicators(const std::string& local_backend) const;

 private:
  std::shared_ptr<Strategy> workers_;  // null: one process
};

}  // namespace mdtrain
