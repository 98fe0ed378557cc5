#include "mdtrain/core/host_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

namespace mdtrain {

namespace {

std::mutex sources_mutex;
HostMemorySources& current_sources() {
  static HostMemorySources sources;
  return sources;
}

// The whole of a small file; nullopt when it cannot be opened.
std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<std::uint64_t> parse_u64(const std::string& text) {
  std::size_t b = text.find_first_not_of(" \t\n");
  std::size_t e = text.find_last_not_of(" \t\n");
  if (b == std::string::npos) return std::nullopt;
  const std::string t = text.substr(b, e - b + 1);
  if (t.empty() || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  errno = 0;
  const unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

// `key` of a "key value" per line file (memory.stat).
std::optional<std::uint64_t> stat_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k, v;
  while (in >> k >> v)
    if (k == key) return parse_u64(v);
  return std::nullopt;
}

struct Mount {
  std::string root, point;  // the hierarchy's directory mounted, and where
};

// The mounts of the cgroup v2 hierarchy and of the v1 hierarchy with the memory controller.
void find_mounts(const std::string& mountinfo, std::optional<Mount>& v2, std::optional<Mount>& v1) {
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, source, options;
    if (!(left >> id >> parent >> dev >> root >> point) || !(right >> fstype >> source >> options)) continue;
    if (fstype == "cgroup2" && !v2) v2 = Mount{root, point};
    if (fstype == "cgroup" && !v1) {
      std::istringstream opts(options);
      std::string opt;
      while (std::getline(opts, opt, ','))
        if (opt == "memory") v1 = Mount{root, point};
    }
  }
}

// The process's cgroup path in the v2 hierarchy ("0::/path") and in the v1 memory hierarchy
// ("4:memory:/path").
void find_cgroup_paths(const std::string& self_cgroup, std::optional<std::string>& v2, std::optional<std::string>& v1) {
  std::istringstream in(self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.substr(0, a) == "0" && controllers.empty()) v2 = path;
    std::istringstream list(controllers);
    std::string c;
    while (std::getline(list, c, ','))
      if (c == "memory") v1 = path;
  }
}

struct Headroom {
  std::uint64_t bytes;
  std::string detail;
};

// The tightest limit minus working set from the cgroup's directory up to the mount point.
std::optional<Headroom> cgroup_headroom(const std::string& root, const Mount& mount, const std::string& path, bool v2) {
  // The path is relative to the hierarchy's root; the mount shows the part under mount.root. A
  // path outside it (a cgroup namespace whose root is the mount) is the mount itself.
  std::string rel;
  if (mount.root == "/") rel = path;
  else if (path.compare(0, mount.root.size(), mount.root) == 0) rel = path.substr(mount.root.size());
  if (rel == "/") rel.clear();
  const std::string top = root + mount.point;
  std::string dir = top + rel;
  const char* limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
  const char* usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
  const char* cache_key = v2 ? "inactive_file" : "total_inactive_file";
  std::optional<Headroom> best;
  for (;;) {
    // Plain values and a flag: GCC's -O3 flow analysis flags optionals of optionals here (a false
    // maybe-uninitialized).
    const std::optional<std::string> limit_text = read_small_file(dir + "/" + limit_file);
    const std::optional<std::string> usage_text = read_small_file(dir + "/" + usage_file);
    const std::optional<std::uint64_t> limit_value = parse_cgroup_limit(limit_text.value_or(""));
    const std::optional<std::uint64_t> usage_value = parse_u64(usage_text.value_or(""));
    const std::uint64_t limit = limit_value.value_or(0), usage = usage_value.value_or(0);
    if (limit_value.has_value() && usage_value.has_value()) {
      std::uint64_t cache = 0;
      if (const auto stat = read_small_file(dir + "/memory.stat"))
        cache = std::min(usage, stat_value(*stat, cache_key).value_or(0));
      const std::uint64_t working = usage - cache;
      const std::uint64_t left = limit > working ? limit - working : 0;
      if (!best || left < best->bytes)
        best = Headroom{left, cat("cgroup ", v2 ? "v2 " : "v1 ", dir, ": ", limit_file, " ", format_bytes(limit), ", ",
                                  usage_file, " ", format_bytes(usage), " of which ", format_bytes(cache),
                                  " inactive file cache")};
    }
    if (dir.size() <= top.size()) break;
    const auto slash = dir.rfind('/');
    if (slash == std::string::npos || slash < top.size()) dir = top;
    else dir = dir.substr(0, slash);
  }
  return best;
}

}  // namespace

std::optional<std::uint64_t> parse_mem_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 13, "MemAvailable:") != 0) continue;
    std::istringstream fields(line.substr(13));
    std::string value, unit;
    fields >> value >> unit;
    const auto kb = parse_u64(value);
    if (!kb || unit != "kB" || *kb > (UINT64_MAX >> 10)) return std::nullopt;
    return *kb << 10;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_cgroup_limit(const std::string& text) {
  const auto v = parse_u64(text);  // "max" is not a number: no limit
  if (!v || *v >= (std::uint64_t{1} << 62)) return std::nullopt;
  return v;
}

std::string format_bytes(std::uint64_t n) {
  char buf[64];
  if (n >= (std::uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(n) / (1 << 30));
  else if (n >= (std::uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  return buf;
}

std::optional<std::uint64_t> HostMemoryAvailable::bytes() const {
  if (mem_available && cgroup_headroom) return std::min(*mem_available, *cgroup_headroom);
  return mem_available ? mem_available : cgroup_headroom;
}

std::string HostMemoryAvailable::describe() const {
  std::string s;
  if (mem_available) s = "MemAvailable " + format_bytes(*mem_available);
  if (cgroup_headroom) s += (s.empty() ? "" : "; ") + cgroup_detail + ": " + format_bytes(*cgroup_headroom) + " left";
  else s += (s.empty() ? "" : "; ") + std::string("no cgroup memory limit");
  return s;
}

HostMemoryAvailable read_host_memory(const HostMemorySources& sources) {
  HostMemoryAvailable result;
  if (const auto meminfo = read_small_file(sources.meminfo)) result.mem_available = parse_mem_available(*meminfo);
  const auto self_cgroup = read_small_file(sources.self_cgroup);
  const auto mountinfo = read_small_file(sources.mountinfo);
  if (!self_cgroup || !mountinfo) return result;
  std::optional<Mount> v2_mount, v1_mount;
  std::optional<std::string> v2_path, v1_path;
  find_mounts(*mountinfo, v2_mount, v1_mount);
  find_cgroup_paths(*self_cgroup, v2_path, v1_path);
  std::vector<Headroom> found;
  if (v2_mount && v2_path)
    if (auto h = cgroup_headroom(sources.root, *v2_mount, *v2_path, true)) found.push_back(std::move(*h));
  if (v1_mount && v1_path)
    if (auto h = cgroup_headroom(sources.root, *v1_mount, *v1_path, false)) found.push_back(std::move(*h));
  for (auto& h : found)
    if (!result.cgroup_headroom || h.bytes < *result.cgroup_headroom) {
      result.cgroup_headroom = h.bytes;
      result.cgroup_detail = std::move(h.detail);
    }
  return result;
}

HostMemoryAvailable read_host_memory() {
  HostMemorySources sources;
  {
    std::lock_guard<std::mutex> lock(sources_mutex);
    sources = current_sources();
  }
  return read_host_memory(sources);
}

HostMemorySources set_host_memory_sources(HostMemorySources sources) {
  std::lock_guard<std::mutex> lock(sources_mutex);
  std::swap(current_sources(), sources);
  return sources;
}

void check_host_allocation(std::size_t bytes) {
  const HostMemoryAvailable now = read_host_memory();
  const auto left = now.bytes();
  if (!left || bytes <= *left) return;
  const std::string sources = now.describe();
  throw HostMemoryExhausted(cat("[allocator] ", format_bytes(bytes), " (", bytes, " bytes) of host memory requested, ",
                                format_bytes(*left), " available (", sources, ")"),
                            bytes, *left, sources);
}

}  // namespace mdtrain
