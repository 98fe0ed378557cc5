#pragma once
#include <string>

namespace mdtrain {

enum class DeviceKind { CPU, CUDA };

// A device a tensor lives on. A physical CPU may be split into several logical CPU devices
// (each runs one replica on its own thread); they share memory, so CPU tensors of any index are
// readable from any CPU thread.
struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  bool operator==(const Device& other) const { return kind == other.kind && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  // "/device:CPU:0" (TensorFlow's canonical spelling).
  std::string to_string() const;
  // Accepts "/cpu:0", "cpu:0", "CPU", "/device:GPU:1", "/job:localhost/replica:0/task:0/device:CPU:1",
  // "gpu:0" / "cuda:0". Throws std::invalid_argument naming the text otherwise.
  static Device parse(const std::string& text);
};

}  // namespace mdtrain
