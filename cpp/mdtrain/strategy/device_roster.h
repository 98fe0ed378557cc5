#pragma once
// DeviceRoster: the devices an executor runs one compiled model's step on, as the caller sees
// them — each device's network, optimizer, last loss sum and profile — kept in one place so the
// bookkeeping every executor shares (how many devices, their networks, their learning rate, their
// optimizer state's bytes, their profiles) is written once, not once per executor. The executor
// owns the records and fills them during its steps; the roster holds views of them, registered
// once when the executor is made, and reads or resets them between steps.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/distribute/communicator.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/step_profile.h"

namespace mdtrain {

class DeviceRoster {
 public:
  // One device's records, owned by the executor; every pointer stays valid while it lives.
  struct Device {
    Network* network = nullptr;
    Optimizer* optimizer = nullptr;
    // False where the device's optimizer holds no state of the job's (a parameter-server worker's
    // copy, the servers hold it): optimizer_state_bytes reports 0 for it.
    bool holds_optimizer_state = true;
    const double* loss_sum = nullptr;  // its sum of per-example losses of the last train or test step
    StepProfile* profile = nullptr;    // summed over steps since the last reset
    // The communicators whose calls and bytes its profile reports (summed into
    // StepProfile::collectives) and reset_profile resets. The owner's pointer is held, so a
    // communicator remade after an abort is the one read.
    std::vector<std::unique_ptr<Communicator>*> counted;
  };

  // `label` starts error messages ("[pipeline]").
  explicit DeviceRoster(std::string label) : label_(std::move(label)) {}

  void add(Device device);
  // The whole steps' wall time, shared by all devices: profile() reports it as each device's wall
  // and reset_profile zeroes it. Unset: each device's profile keeps its own wall.
  void set_shared_wall(double* wall) { wall_ = wall; }
  // set_learning_rate throws std::invalid_argument(reason) instead (the learning rate lives
  // elsewhere, e.g. on the parameter servers).
  void fix_learning_rate(std::string reason) { fixed_learning_rate_ = std::move(reason); }

  int size() const { return static_cast<int>(devices_.size()); }
  // Throws std::out_of_range outside [0, size()).
  Network& network(int device) const;
  // Device 0's optimizer: hyperparameters, learning rate and iterations of every device.
  Optimizer& optimizer() const { return *devices_.front().optimizer; }
  void set_learning_rate(double lr) const;
  std::vector<double> loss_sums() const;
  std::vector<std::int64_t> optimizer_state_bytes() const;
  std::vector<StepProfile> profile() const;
  void reset_profile() const;

 private:
  std::string label_;
  std::vector<Device> devices_;
  double* wall_ = nullptr;
  std::string fixed_learning_rate_;
};

}  // namespace mdtrain
