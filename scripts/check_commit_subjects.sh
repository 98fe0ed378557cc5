#!/usr/bin/env bash
# Commit subjects are at most 72 characters, with the story (figures, reasons) in the body
# (docs/design.md, "Docs, results and history"). This fails, listing them, when a commit made
# after the one that added this script has a longer subject. Older history is left as it is.
# Where there is no git or no history to read (an sdist, a shallow clone without the base commit),
# it says so and passes: there is nothing it can check there.
set -uo pipefail
cd "$(dirname "$0")/.."
limit=72
self=scripts/check_commit_subjects.sh

if ! command -v git >/dev/null 2>&1; then
  echo "commit subjects: git not found, not checked"
  exit 0
fi
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "commit subjects: not a git checkout, not checked"
  exit 0
fi
base=$(git log --diff-filter=A --format=%H -- "$self" 2>/dev/null | tail -1)
if [ -z "$base" ]; then
  echo "commit subjects: $self is not committed yet, nothing to check"
  exit 0
fi
range="$base..HEAD"
# In a shallow clone the oldest commit present seems to add every file. When the base found is
# such a cut-off commit, the real one is not in the history: every commit present is after it.
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = "true" ] &&
  grep -qx "$base" "$(git rev-parse --git-path shallow)" 2>/dev/null; then
  echo "commit subjects: shallow clone, checking the commits it holds"
  range=HEAD
fi

# Characters, not bytes: a UTF-8 locale for ${#subject}.
export LC_ALL=C.UTF-8
long=()
count=0
while IFS= read -r line; do
  count=$((count + 1))
  subject=${line#* }
  if [ "${#subject}" -gt "$limit" ]; then
    long+=("${line%% *} (${#subject} chars) $subject")
  fi
done < <(git log --format='%h %s' "$range")

if [ "${#long[@]}" -gt 0 ]; then
  echo "commit subjects: over $limit characters in ${#long[@]} of the $count commits checked:"
  printf '  %s\n' "${long[@]}"
  echo "Keep the subject to $limit characters and put the story in the body (git commit --amend before pushing)."
  exit 1
fi
echo "commit subjects: at most $limit characters in all $count commits checked (after ${base:0:12})"
