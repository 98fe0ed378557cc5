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
# In a shallow clone the oldest commit present seems to add every file, so the base may be
# that one; the commits after it are still after the real base, so the check holds for them.
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = "true" ]; then
  echo "commit subjects: shallow clone, the history may start after this script's first commit"
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
done < <(git log --format='%h %s' "$base..HEAD")

if [ "${#long[@]}" -gt 0 ]; then
  echo "commit subjects: ${#long[@]} of $count commits after ${base:0:12} have subjects over $limit characters:"
  printf '  %s\n' "${long[@]}"
  echo "Keep the subject to $limit characters and put the story in the body (git commit --amend before pushing)."
  exit 1
fi
echo "commit subjects: the $count commits after ${base:0:12} have subjects of at most $limit characters"
