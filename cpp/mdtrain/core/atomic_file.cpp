#include "mdtrain/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
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

}  // namespace

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  MDTRAIN_CHECK(!path.empty(), std::invalid_argument, "[io] cannot write a file with an empty path");
  std::string tmp;
  int fd = -1;
  // A stale temporary from a crashed process with a recycled pid is possible; try further names.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = cat(path, ".tmp.", ::getpid(), ".", temp_counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) write_error(path, errno);
  }
  if (fd < 0) write_error(path, EEXIST);

  auto discard = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
    ::unlink(tmp.c_str());
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

std::string read_file(const std::string& path) {
  auto read_error = [&](int err) {
    fail<IoError>("[io] cannot read '", path, "': ", std::strerror(err));
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) read_error(errno);
  std::string data;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) data.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, chunk, sizeof(chunk));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      read_error(err);
    }
    if (r == 0) break;
    data.append(chunk, static_cast<std::size_t>(r));
  }
  ::close(fd);
  return data;
}

}  // namespace mdtrain
