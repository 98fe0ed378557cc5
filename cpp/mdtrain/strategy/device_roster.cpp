#include "mdtrain/strategy/device_roster.h"

#include <stdexcept>
#include <utility>

#include "mdtrain/core/errors.h"

namespace mdtrain {

void DeviceRoster::add(Device device) { devices_.push_back(std::move(device)); }

Network& DeviceRoster::network(int device) const {
  MDTRAIN_CHECK(device >= 0 && device < size(), std::out_of_range, label_, " device ", device, " out of range for ",
                size(), " devices");
  return *devices_[static_cast<std::size_t>(device)].network;
}

void DeviceRoster::set_learning_rate(double lr) const {
  if (!fixed_learning_rate_.empty()) fail<std::invalid_argument>(fixed_learning_rate_);
  for (const Device& d : devices_) d.optimizer->set_learning_rate(lr);
}

std::vector<double> DeviceRoster::loss_sums() const {
  std::vector<double> out;
  for (const Device& d : devices_) out.push_back(*d.loss_sum);
  return out;
}

std::vector<std::int64_t> DeviceRoster::optimizer_state_bytes() const {
  std::vector<std::int64_t> out;
  for (const Device& d : devices_) out.push_back(d.holds_optimizer_state ? d.optimizer->state_bytes() : 0);
  return out;
}

std::vector<StepProfile> DeviceRoster::profile() const {
  std::vector<StepProfile> out;
  for (const Device& d : devices_) {
    out.push_back(*d.profile);
    if (wall_) out.back().wall = *wall_;
    for (const std::unique_ptr<Communicator>* comm : d.counted)
      for (int k = 0; k < kCountedCollectives; ++k) {
        out.back().collectives.of[k].calls += (*comm)->counts().of[k].calls;
        out.back().collectives.of[k].bytes += (*comm)->counts().of[k].bytes;
      }
  }
  return out;
}

void DeviceRoster::reset_profile() const {
  for (const Device& d : devices_) {
    *d.profile = StepProfile{};
    for (const std::unique_ptr<Communicator>* comm : d.counted) (*comm)->reset_counts();
  }
  if (wall_) *wall_ = 0;
}

}  // namespace mdtrain
