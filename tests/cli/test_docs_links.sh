#!/usr/bin/env bash
# The documentation's links hold: every relative link in README.md, docs/*.md and examples/*/README.md
# names a file or folder of the repository, and a link's #anchor names a heading of the page it points
# to (GitHub's anchors: the heading in lower case, punctuation dropped, spaces as hyphens, -1, -2 ...
# for repeats). Links inside fenced code blocks are not links. The README links every page of docs/,
# and every page written by hand links back to the README (docs/benchmarks.md is written by
# scripts/bench/all.sh, which decides its content; its links are checked like any other's).
# Usage: test_docs_links.sh LAMP SOURCE_DIR (LAMP is unused: the check reads only the sources)
set -u
src=$2
passed=0
failed=0
check() { # name, condition result
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}

# The anchors of a page, one per line.
anchors() {
  LC_ALL=C awk '
    /^```/ { fence = !fence; next }
    fence || !/^#+ / { next }
    {
      s = $0
      sub(/^#+ +/, "", s)
      s = tolower(s)
      gsub(/[^a-z0-9 _-]/, "", s)
      gsub(/ /, "-", s)
      n = seen[s]++
      print (n ? s "-" n : s)
    }' "$1"
}

# The links of a page outside code fences, one per line: LINE TARGET.
links() {
  LC_ALL=C awk '
    /^```/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      while (match(line, /\]\([^) ]+\)/)) {
        print NR, substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

pages=("$src/README.md" "$src"/docs/*.md "$src"/examples/*/README.md)
total=0
for page in "${pages[@]}"; do
  rel=${page#"$src"/}
  dir=$(dirname "$page")
  while read -r line target; do
    [[ -z "$target" ]] && continue
    case $target in http://* | https://* | mailto:*) continue ;; esac
    total=$((total + 1))
    file=${target%%#*}
    anchor=
    [[ $target == *"#"* ]] && anchor=${target#*#}
    if [[ -z "$file" ]]; then
      path=$page
    else
      path=$dir/$file
    fi
    [[ -e "$path" ]]; check "$rel:$line: $target: no such file ($path)" $?
    if [[ -n "$anchor" && -f "$path" ]]; then
      anchors "$path" | grep -qxF -- "$anchor"
      check "$rel:$line: $target: no heading with the anchor #$anchor in ${path#"$src"/}" $?
    fi
  done < <(links "$page")
done
(( total > 50 )); check "the pages hold relative links to check (found $total)" $?

for page in "$src"/docs/*.md; do
  name=$(basename "$page")
  if [[ $name != benchmarks.md ]]; then
    links "$page" | grep -qE ' \.\./README\.md(#|$)'; check "docs/$name links back to the README" $?
  fi
  links "$src/README.md" | grep -qE " docs/$name(#|$)"; check "the README links docs/$name" $?
done

echo "docs links: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
