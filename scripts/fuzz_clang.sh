#!/usr/bin/env bash
# Prints the clang++ that builds mdtrain's libFuzzer targets (and the test command's ASan build),
# or nothing when there is none: clang 16 or newer, since the library captures structured bindings
# in lambdas (C++20, which GCC and clang >= 16 accept in C++17 mode; clang 14 and 15 refuse it).
for v in 20 19 18 17 16; do
  if command -v "clang++-$v" >/dev/null; then echo "clang++-$v"; exit 0; fi
done
if clang++ --version 2>/dev/null | grep -qE "clang version (1[6-9]|[2-9][0-9])"; then echo clang++; fi
