#include "mdtrain/core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <streambuf>
#include <vector>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

[[noreturn]] void write_error(const std::string& path, int err) {
  fail<IoError>("[io] cannot write '", path, "': ", std::strerror(err));
}

// Writes all of [data, data + n) to fd; returns 0 or the errno of the failure.
int write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

// A buffered streambuf over a file descriptor that remembers the errno of the first failure,
// so the caller can report "No space left on device" rather than a bare stream failure.
class FdWriteBuffer : public std::streambuf {
 public:
  explicit FdWriteBuffer(int fd) : fd_(fd), buf_(1 << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type ch) override {
    if (flush_buffer() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    // Large blocks (tensor payloads) bypass the buffer.
    if (n >= static_cast<std::streamsize>(buf_.size())) {
      if (flush_buffer() != 0) return 0;
      if (int err = write_all(fd_, s, static_cast<std::size_t>(n))) {
        error_ = err;
        return 0;
      }
      return n;
    }
    return std::streambuf::xsputn(s, n);
  }

  int sync() override { return flush_buffer() == 0 ? 0 : -1; }

 private:
  int flush_buffer() {
    if (error_) return error_;
    std::size_t n = static_cast<std::size_t>(pptr() - pbase());
    if (n) error_ = write_all(fd_, pbase(), n);
    setp(buf_.data(), buf_.data() + buf_.size());
    return error_;
  }

  int fd_;
  std::vector<char> buf_;
  int error_ = 0;
};

std::string directory_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Makes the rename itself durable. Filesystems that cannot sync a directory say EINVAL/ENOTSUP;
// there is nothing more to do on those.
void sync_directory(const std::string& path) {
  int dfd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) write_error(path, errno);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP && err != EROFS) write_error(path, err);
}

std::atomic<unsigned> temp_counter{0};

// The temporaries this process is writing right now (full paths): a temporary with our pid that is
// not in here was left by an earlier process that had the same pid.
std::mutex in_progress_mutex;
std::set<std::string> in_progress;

bool is_in_progress(const std::string& tmp) {
  std::lock_guard<std::mutex> lock(in_progress_mutex);
  return in_progress.count(tmp) != 0;
}

// Parses the "<pid>.<n>" after "<name>.tmp." as this file's writers spell it (decimal, no sign,
// no leading zero); returns 0 for anything else.
pid_t writer_pid(const std::string& suffix) {
  auto dot = suffix.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 9 || dot + 1 == suffix.size()) return 0;
  if (suffix[0] == '0') return 0;
  pid_t pid = 0;
  for (std::size_t i = 0; i < dot; ++i) {
    if (suffix[i] < '0' || suffix[i] > '9') return 0;
    pid = pid * 10 + (suffix[i] - '0');
  }
  for (std::size_t i = dot + 1; i < suffix.size(); ++i)
    if (suffix[i] < '0' || suffix[i] > '9') return 0;
  return pid;
}

// Removes "<path>.tmp.<pid>.<n>" files whose writer is dead (see the header). Best effort: a
// directory that cannot be listed or a file that cannot be removed is left as it is, since the
// write itself may still succeed.
void remove_stale_temporaries(const std::string& path) {
  auto slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty()) return;
  std::string dir = directory_of(path);
  const std::string prefix = name + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  const pid_t self = ::getpid();
  while (dirent* e = ::readdir(d)) {
    std::string entry = e->d_name;
    if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) continue;
    pid_t pid = writer_pid(entry.substr(prefix.size()));
    if (pid <= 0) continue;
    std::string full = (dir == "/" ? "" : dir) + "/" + entry;
    bool dead = pid == self ? !is_in_progress(full) : ::kill(pid, 0) != 0 && errno == ESRCH;
    if (dead) stale.push_back(full);
  }
  ::closedir(d);
  for (const auto& f : stale) ::unlink(f.c_str());
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  MDTRAIN_CHECK(!path.empty(), std::invalid_argument, "[io] cannot write a file with an empty path");
  remove_stale_temporaries(path);
  std::string tmp;
  int fd = -1;
  // Registered before it exists, so that another thread's cleanup never takes it for stale.
  auto start = [&](const std::string& name) {
    std::lock_guard<std::mutex> lock(in_progress_mutex);
    in_progress.insert(name);
  };
  auto finish = [&] {
    std::lock_guard<std::mutex> lock(in_progress_mutex);
    in_progress.erase(tmp);
  };
  // A name can still be taken (a stale temporary that could not be removed); try further names.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = cat(path, ".tmp.", ::getpid(), ".", temp_counter.fetch_add(1));
    start(tmp);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      int err = errno;
      finish();
      if (err != EEXIST) write_error(path, err);
    }
  }
  if (fd < 0) write_error(path, EEXIST);

  auto discard = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
    ::unlink(tmp.c_str());
    finish();
  };
  try {
    FdWriteBuffer buffer(fd);
    std::ostream out(&buffer);
    out.exceptions(std::ios::goodbit);  // failures are read from buffer.error()
    write(out);
    out.flush();
    if (buffer.error()) write_error(path, buffer.error());
    if (!out) fail<IoError>("[io] cannot write '", path, "': stream error");
    if (::fsync(fd) != 0) write_error(path, errno);
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) write_error(path, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) write_error(path, errno);
    finish();
  } catch (...) {
    discard();
    throw;
  }
  sync_directory(path);
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  write_file_atomically(path, [&](std::ostream& out) {
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  });
}

static std::string describe_file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int open_regular_file(const std::string& path, std::uint64_t& size, std::string& why, bool& missing) {
  missing = false;
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, possibly forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    missing = err == ENOENT || err == ENOTDIR;
    why = std::strerror(err);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    std::string type = describe_file_type(st.st_mode);
    why = type == "not a regular file" ? type : "it is " + type + ", not a regular file";
    ::close(fd);
    return -1;
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

std::string read_file(const std::string& path) {
  auto read_error = [&](const std::string& why) { fail<IoError>("[io] cannot read '", path, "': ", why); };
  std::uint64_t size = 0;
  std::string why;
  bool missing = false;
  int fd = open_regular_file(path, size, why, missing);
  if (fd < 0) read_error(why);
  std::string data;
  try {
    data.reserve(static_cast<std::size_t>(size));
  } catch (const std::exception&) {
    ::close(fd);
    fail<AllocationError>("[io] cannot read '", path, "': ", size, " bytes do not fit in memory");
  }
  char chunk[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, chunk, sizeof(chunk));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      read_error(std::strerror(err));
    }
    if (r == 0) break;
    data.append(chunk, static_cast<std::size_t>(r));
  }
  ::close(fd);
  return data;
}

}  // namespace mdtrain
