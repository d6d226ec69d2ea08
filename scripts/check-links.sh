#!/usr/bin/env bash
# Checks the links of the README, docs/*.md and crates/*/README.md, offline: every relative link
# must name a file or directory that exists, and every #anchor a heading of its file (GitHub's
# slugs: lowercase, spaces to '-', punctuation other than '-' and '_' dropped, '-1', '-2' … for
# repeats). Links to this repository's own GitHub pages (the `repository` of Cargo.toml followed
# by /blob/main/ or /tree/main/, as the crates' READMEs write them for crates.io) are checked
# as paths in the checkout; other web links are not checked.
# Also checks that every one of these files with a ```rust block is compiled as doctests, i.e.
# included by crates/redquorum/src/lib.rs.
# Prints one line per broken link and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

files=(README.md docs/*.md crates/*/README.md)
repo_url=$(sed -n 's/^repository *= *"\(.*\)"$/\1/p' Cargo.toml | head -n 1)

# One record per heading ("H", file, slug) and per link ("L", file, line, target), from the
# text outside fenced code blocks and inline code spans.
records=$(awk '
  function slug(text,   s) {
    s = text
    gsub(/\[[^]]*\]\([^)]*\)/, "", s)  # a link in a heading would count by its text; none yet
    s = tolower(s)
    gsub(/[^a-z0-9 _-]/, "", s)
    gsub(/ /, "-", s)
    return s
  }
  FNR == 1 { fence = 0; incode = 0; delete seen }
  /^[ \t]*(```|~~~)/ { fence = !fence; next }
  fence { next }
  /^[ \t]*$/ { incode = 0; next }
  {
    # Drop inline code, which may run over into the next line of its paragraph.
    n = split($0, parts, "`"); text = ""
    for (i = 1; i <= n; i++) { if (!incode) text = text parts[i]; if (i < n) incode = !incode }
    # (No interval expressions such as #{1,6}: mawk, the awk of Debian, lacks them.)
    if (match(text, /^#+[ \t]+/) && match(text, /^#+/) && RLENGTH <= 6) {
      h = text; sub(/^#+[ \t]+/, "", h); sub(/[ \t#]*$/, "", h)
      s = slug(h)
      if (s in seen) { seen[s]++; s = s "-" seen[s] } else seen[s] = 0
      print "H\t" FILENAME "\t" s
    }
    rest = text
    while (rest ~ /(id|name)="[^"]+"/) {
      match(rest, /(id|name)="[^"]+"/); a = substr(rest, RSTART, RLENGTH)
      sub(/^[a-z]+="/, "", a); sub(/"$/, "", a)
      print "H\t" FILENAME "\t" a
      rest = substr(rest, RSTART + RLENGTH)
    }
    rest = text
    while (match(rest, /\]\(<?[^)> \t]+/)) {
      t = substr(rest, RSTART + 2, RLENGTH - 2); sub(/^</, "", t)
      print "L\t" FILENAME "\t" FNR "\t" t
      rest = substr(rest, RSTART + RLENGTH)
    }
    if (match(text, /^(   |  | )?\[[^]]+\]:[ \t]+<?[^ \t>]+/)) {
      t = text; sub(/^ *\[[^]]+\]:[ \t]+/, "", t); sub(/^</, "", t)
      sub(/[ \t>].*$/, "", t)
      print "L\t" FILENAME "\t" FNR "\t" t
    }
  }
' "${files[@]}")

declare -A anchors=()
while IFS=$'\t' read -r kind file a _; do
  [[ $kind == H ]] && anchors["$file#$a"]=1
done <<<"$records"

broken=0
report() {
  echo "$1:$2: broken link $3 ($4)" >&2
  broken=$((broken + 1))
}

while IFS=$'\t' read -r kind file line target; do
  [[ $kind == L ]] || continue
  path=$target
  if [[ -n $repo_url && ( $path == "$repo_url/blob/main/"* || $path == "$repo_url/tree/main/"* ) ]]; then
    path=${path#"$repo_url"/*/main/}
    base=.
  elif [[ $path =~ ^[a-zA-Z][a-zA-Z0-9+.-]*: ]]; then
    continue # another site, or mailto:
  else
    base=$(dirname "$file")
  fi
  anchor=
  if [[ $path == *'#'* ]]; then
    anchor=${path#*#}
    path=${path%%#*}
  fi
  if [[ -z $path ]]; then
    resolved=$file
  else
    resolved=$(realpath -m --relative-to=. "$base/$path")
    if [[ ! -e $resolved ]]; then
      report "$file" "$line" "$target" "no such file: $resolved"
      continue
    fi
  fi
  if [[ -n $anchor && -z ${anchors["$resolved#$anchor"]:-} ]]; then
    if [[ $resolved == *.md && " ${files[*]} " == *" $resolved "* ]]; then
      report "$file" "$line" "$target" "no heading #$anchor in $resolved"
    else
      report "$file" "$line" "$target" "an anchor into $resolved, which is not checked"
    fi
  fi
done <<<"$records"

# Every file here with Rust examples must be a doctest include of the library.
lib=crates/redquorum/src/lib.rs
included=$(sed -n 's/.*include_str!("\([^"]*\.md\)").*/\1/p' "$lib" |
  while read -r inc; do realpath -m --relative-to=. "$(dirname "$lib")/$inc"; done)
for file in "${files[@]}"; do
  if grep -q '^[[:space:]]*```rust' "$file" && ! grep -qxF "$file" <<<"$included"; then
    echo "$file: has Rust code blocks but is not included as doctests in $lib" >&2
    broken=$((broken + 1))
  fi
done

if ((broken > 0)); then
  echo "check-links: $broken broken" >&2
  exit 1
fi
echo "check-links: ${#files[@]} files, every link resolves"
