#include "mdtrain/distribute/registry.h"

#include <mutex>
#include <utility>

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/distribute/single_communicator.h"
#include "mdtrain/distribute/threads/threads_communicator.h"

namespace mdtrain {
namespace {

struct Entry {
  std::string name;
  CommunicatorFactory factory;
  std::function<bool()> available;
};

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::vector<std::unique_ptr<Communicator>> one(std::unique_ptr<Communicator> comm) {
  std::vector<std::unique_ptr<Communicator>> v;
  v.push_back(std::move(comm));
  return v;
}

void check_one(const char* backend, int local_size) {
  MDTRAIN_CHECK(local_size == 1, std::invalid_argument, "[distribute] backend '", backend,
                "' drives one rank per process: local_size must be 1 (got ", local_size, ")");
}

// The built-ins are registered here rather than by static initialisers in their own files: in
// a static library the linker drops object files that nothing references, registrars included.
class Registry {
 public:
  Registry() {
    entries_.push_back({"single",
                        [](int local_size) {
                          check_one("single", local_size);
                          return one(make_single_communicator());
                        },
                        [] { return true; }});
    entries_.push_back(
        {"threads", [](int local_size) { return ThreadsCommunicator::create_group(local_size); }, [] { return true; }});
    entries_.push_back({"mpi",
                        [](int local_size) {
                          check_one("mpi", local_size);
                          return one(make_mpi_communicator());
                        },
                        [] { return mpi_available(); }});
    entries_.push_back(
        {"nccl", [](int local_size) { return make_nccl_communicators(local_size); }, [] { return nccl_available(); }});
  }

  static Registry& instance() {
    static Registry registry;
    return registry;
  }

  void add(Entry entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    MDTRAIN_CHECK(!entry.name.empty(), std::invalid_argument, "[distribute] register_backend: name is empty");
    MDTRAIN_CHECK(entry.factory != nullptr, std::invalid_argument, "[distribute] register_backend: factory of '",
                  entry.name, "' is empty");
    for (const auto& e : entries_) {
      MDTRAIN_CHECK(e.name != entry.name, std::invalid_argument, "[distribute] register_backend: '", entry.name,
                    "' is already registered");
    }
    if (!entry.available) entry.available = [] { return true; };
    entries_.push_back(std::move(entry));
  }

  std::vector<std::string> names(bool only_available) const {
    std::vector<Entry> copy = snapshot();
    std::vector<std::string> out;
    for (const auto& e : copy) {
      if (!only_available || e.available()) out.push_back(e.name);
    }
    return out;
  }

  Entry find(const std::string& name) const {
    std::vector<Entry> copy = snapshot();
    for (auto& e : copy) {
      if (e.name == name) return e;
    }
    std::vector<std::string> all;
    for (const auto& e : copy) all.push_back(e.name);
    fail<std::invalid_argument>("[distribute] unknown backend '", name, "'; registered: ", join(all));
  }

 private:
  // Factories run outside the lock: they may take long (MPI init) or register backends.
  std::vector<Entry> snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_;
  }

  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace

void register_backend(const std::string& name, CommunicatorFactory factory, std::function<bool()> available) {
  Registry::instance().add({name, std::move(factory), std::move(available)});
}

std::vector<std::string> registered_backends() { return Registry::instance().names(false); }

std::vector<std::string> available_backends() { return Registry::instance().names(true); }

bool is_backend_available(const std::string& name) {
  for (const auto& n : available_backends()) {
    if (n == name) return true;
  }
  return false;
}

std::vector<std::unique_ptr<Communicator>> create_communicators(const std::string& backend, int local_size) {
  MDTRAIN_CHECK(local_size >= 1, std::invalid_argument,
                "[distribute] create_communicators: local_size must be >= 1 (got ", local_size, ")");
  Entry entry = Registry::instance().find(backend);
  return entry.factory(local_size);
}

}  // namespace mdtrain
