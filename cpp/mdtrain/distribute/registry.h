#pragma once
// Backends by name. Built in: "single" (always), "threads" (always), "mpi" and "nccl" (available
// when the build has them; creating them otherwise throws std::runtime_error saying how to
// rebuild). Other code may add its own with register_backend.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

// Makes the communicators this process drives: local_size of them (one per thread or device),
// for ranks that the backend decides (threads: 0..local_size-1; mpi: this process's rank).
using CommunicatorFactory = std::function<std::vector<std::unique_ptr<Communicator>>(int local_size)>;

// Adds a backend. `available` (default: always) tells whether this process can use it. A name
// already registered is a std::invalid_argument. Thread-safe.
void register_backend(const std::string& name, CommunicatorFactory factory, std::function<bool()> available = {});

// Registered names, in registration order (built-ins first).
std::vector<std::string> registered_backends();
// The registered names whose `available` is true.
std::vector<std::string> available_backends();
bool is_backend_available(const std::string& name);

// An unknown name or local_size < 1 is a std::invalid_argument naming the registered backends.
std::vector<std::unique_ptr<Communicator>> create_communicators(const std::string& backend, int local_size = 1);

}  // namespace mdtrain
