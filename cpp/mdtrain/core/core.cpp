// Small definitions for dtype.h, shape.h, device.h and allocator.h.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <new>
#include <utility>

#include "mdtrain/core/allocator.h"
#include "mdtrain/core/caching_allocator.h"
#include "mdtrain/core/device.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/dtype.h"
#include "mdtrain/core/allocation_budget.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/host_blocks.h"
#include "mdtrain/core/host_memory.h"
#include "mdtrain/core/memory_stats.h"
#include "mdtrain/core/shape.h"

namespace mdtrain {

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::UInt8: return 1;
  }
  fail<std::invalid_argument>("[dtype] unknown dtype");
}

const char* name_of(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
  }
  return "unknown";
}

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string to_string(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? std::string("None") : std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

bool has_unknown_dim(const Shape& shape) {
  for (auto d : shape)
    if (d == kUnknownDim) return true;
  return false;
}

bool fits_declared(const Shape& declared, const Shape& actual) {
  if (declared.size() != actual.size()) return false;
  for (std::size_t i = 0; i < declared.size(); ++i)
    if (declared[i] != kUnknownDim && declared[i] != actual[i]) return false;
  return true;
}

std::string Device::to_string() const { return cat("/device:", kind == DeviceKind::CPU ? "CPU" : "GPU", ":", index); }

Device Device::parse(const std::string& text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // Keep only the last "/"-separated component that names a device ("device:cpu:0" or "cpu:0").
  auto pos = t.rfind("device:");
  if (pos != std::string::npos) t = t.substr(pos + 7);
  while (!t.empty() && t.front() == '/') t.erase(t.begin());
  Device d;
  std::string kind = t, index;
  auto colon = t.find(':');
  if (colon != std::string::npos) {
    kind = t.substr(0, colon);
    index = t.substr(colon + 1);
  }
  if (kind == "cpu") d.kind = DeviceKind::CPU;
  else if (kind == "gpu" || kind == "cuda") d.kind = DeviceKind::CUDA;
  else
    fail<std::invalid_argument>("[device] cannot parse device name '", text,
                                "': expected forms like '/cpu:0' or '/gpu:1'");
  if (!index.empty()) {
    MDTRAIN_CHECK(std::all_of(index.begin(), index.end(), [](char c) { return std::isdigit(c); }),
                  std::invalid_argument, "[device] bad device index in '", text, "'");
    d.index = std::stoi(index);
  }
  return d;
}

std::shared_ptr<void> allocate(const Device& device, std::size_t bytes) {
  if (!device.is_cpu()) {
    // The device's caching allocator; charged to the GPU by its size class (what the block holds).
    std::shared_ptr<void> block = cuda::allocate(device, bytes);
    void* p = block.get();
    return memory_accounting::charge(device, p, CachingAllocator::size_class(bytes), nullptr, std::move(block));
  }
  AllocationBudget::charge(bytes);
  // Before malloc: with overcommit a block larger than what is left is handed out and the process
  // is killed later, when its pages are touched (host_memory.h).
  if (bytes >= kLargeHostAllocation) check_host_allocation(bytes);
  std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kCacheLineBytes - 1) / kCacheLineBytes * kCacheLineBytes;
  if (rounded < bytes) fail<AllocationError>("[allocator] size overflow for ", bytes, " bytes");
  void* p = allocate_host_block(rounded);
  if (!p)
    fail<AllocationError>("[allocator] cannot allocate ", bytes, " bytes (", bytes / (1 << 20), " MiB) on ",
                          device.to_string());
  // Charged what the tensor holds; a large block's tail to its last huge page boundary is not.
  return memory_accounting::charge(device, p, rounded, free_host_block, nullptr);
}

}  // namespace mdtrain
