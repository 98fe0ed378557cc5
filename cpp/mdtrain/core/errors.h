#pragma once
// Error conventions: every C++ error is a std:: exception whose message starts with "[area]".
// Nothing in mdtrain calls exit() or abort(); the Python bindings map these types to
// ValueError (invalid_argument, domain_error), IndexError (out_of_range), MemoryError
// (AllocationError), OSError (IoError), RuntimeError (runtime_error) and TimeoutError (TimeoutError).
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mdtrain {

// Raised when memory for a tensor cannot be had; maps to Python's MemoryError.
class AllocationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised when a file cannot be read or written; maps to Python's OSError.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised when a collective waited longer than its timeout; maps to Python's TimeoutError.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class Exception, class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Exception(cat(std::forward<Args>(args)...));
}

}  // namespace mdtrain

// MDTRAIN_CHECK(cond, std::invalid_argument, "[area] message ", value, ...)
#define MDTRAIN_CHECK(cond, Exception, ...)               \
  do {                                                    \
    if (!(cond)) ::mdtrain::fail<Exception>(__VA_ARGS__); \
  } while (0)
