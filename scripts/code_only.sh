#!/usr/bin/env bash
# A code-only checkout for a machine that takes the working tree but not the committed studies (a lent GPU takes
# at most 64 MiB of tracked and unignored files; the run directories under runs/ hold ~200 MiB of per-step logs).
#
#   bash scripts/code_only.sh on       # take the studies' run directories out of the index and ignore them
#   bash scripts/code_only.sh off      # put them back exactly as HEAD has them
#   bash scripts/code_only.sh size     # MiB of what a copy of the working tree would take now
#
# Nothing on disk is touched: `on` only unstages runs/<study>/ (runs/tokenizers/ and runs/*.json stay, a BPE run
# needs its tokenizer file) and adds an ignore block to .git/info/exclude; `off` undoes both. While it is on, a
# pre-commit hook refuses every commit, since the index then holds the deletion of every committed run.
set -euo pipefail
cd "$(dirname "$0")/.."
git_dir=$(git rev-parse --git-dir)
marker="$git_dir/embnorm-code-only"
hook="$git_dir/hooks/pre-commit"
begin="# >>> embnorm code-only (scripts/code_only.sh off removes this block)"
end="# <<< embnorm code-only"

size() {
  git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null \
    | awk '{s += $1} END {printf "%.1f MiB in tracked and unignored files\n", s / 1048576}'
}

study_dirs() {  # the committed run directories: every folder under runs/ except the tokenizers
  git ls-files -z -- runs | tr '\0' '\n' | awk -F/ 'NF > 2 && $2 != "tokenizers" {print $1 "/" $2}' | sort -u
}

case "${1:-}" in
  on)
    if [ -e "$marker" ]; then echo "code-only is already on (bash scripts/code_only.sh off to undo)"; exit 1; fi
    if ! git diff --cached --quiet -- runs; then
      echo "code_only.sh on: runs/ has staged changes; commit or unstage them first"; exit 1
    fi
    if [ -e "$hook" ]; then echo "code_only.sh on: $hook exists; this script will not replace it"; exit 1; fi
    mapfile -t dirs < <(study_dirs)
    [ "${#dirs[@]}" -gt 0 ] && git rm -r -q --cached -- "${dirs[@]}"
    printf '%s\n/runs/*/\n!/runs/tokenizers/\n%s\n' "$begin" "$end" >> "$git_dir/info/exclude"
    mkdir -p "$(dirname "$hook")"  # a checkout may have no hooks folder (git init --template= leaves none)
    printf '#!/bin/sh\necho "code-only checkout: run bash scripts/code_only.sh off before committing" >&2\nexit 1\n' > "$hook"
    chmod +x "$hook"
    touch "$marker"
    echo "code-only on: ${#dirs[@]} run directories left the index"; size ;;
  off)
    if [ ! -e "$marker" ]; then echo "code-only is not on"; exit 1; fi
    awk -v b="$begin" -v e="$end" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' "$git_dir/info/exclude" \
      > "$git_dir/info/exclude.tmp" && mv "$git_dir/info/exclude.tmp" "$git_dir/info/exclude"
    git reset -q -- runs
    rm -f "$hook" "$marker"
    echo "code-only off"; size ;;
  size) size ;;
  *) echo "usage: bash scripts/code_only.sh on|off|size (got '${1:-}')"; exit 2 ;;
esac
