#pragma once
#include <memory>
#include <string>

#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// tf.distribute.MultiWorkerMirroredStrategy: MirroredStrategy across processes. Each process (a
// worker, started by mpirun/srun or `python -m mdtrain.launch`) drives a replica per local device;
// every replica of every worker takes its slice of each global batch, and gradients are summed
// over all of them: inside the worker first, then between workers over MPI (see
// HierarchicalCommunicator), so replicas on all workers stay bitwise identical. On GPUs the
// workers' first GPUs form an NCCL group whose id travels over MPI (nothing home-made on the
// wire), and the GPUs of one worker an in-process NCCL group.
//
// The worker count and index come from MPI (MPI_COMM_WORLD). A process not started by an MPI
// launcher, or a build without MPI, is a job of one worker: the strategy is then a
// MirroredStrategy over the local devices.
class MultiWorkerMirroredStrategy : public Strategy {
 public:
  // `local_communication`: the backend between this worker's replicas ("threads" on logical CPU
  // devices). `use_mpi`: join the MPI job (collective: every worker constructs its strategies in
  // the same order); false makes a one-worker strategy.
  MultiWorkerMirroredStrategy(std::vector<Device> local_devices, std::string local_communication, bool use_mpi);
  ~MultiWorkerMirroredStrategy() override;

  std::string name() const override { return "MultiWorkerMirroredStrategy"; }
  int num_workers() const override { return num_workers_; }
  int worker_index() const override { return worker_index_; }
  std::vector<std::unique_ptr<Communicator>> make_replica_communicators() const override;

  // Host-side coordination between workers, from the thread that drives training (never while
  // replicas run): copy worker 0's bytes to every worker, and wait for every worker.
  void broadcast_from_chief(void* data, std::size_t bytes);
  void barrier();
  void sum_across_workers(std::vector<double>& values) override;
  void abort(const std::string& reason) override;
  // Seconds a worker waits in a collective for the others before reporting which did not arrive.
  void set_timeout(double seconds);
  double timeout() const { return timeout_; }

 private:
  // MPI between workers on CPU devices; on GPUs, NCCL bootstrapped over MPI.
  std::unique_ptr<Communicator> make_cross_worker_communicator() const;

  std::string local_communication_;
  int num_workers_ = 1;
  int worker_index_ = 0;
  double timeout_ = Communicator::kDefaultTimeout;
  std::unique_ptr<Communicator> control_;  // among the workers (null with one worker)
};

}  // namespace mdtrain
