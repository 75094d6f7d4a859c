#!/usr/bin/env bash
# Checks the mechanical claims of docs/architecture.md against the sources, with grep, find and
# awk only (no network, no build):
#   1. layering: every `crate::` path in crates/slurm-bridge/src goes to a module of the same or
#      a lower layer of the doc's layer table, components never use one another, and every
#      exception the doc lists still occurs;
#   2. module map: every file under crates/slurm-bridge/src is in the doc's module map (by its
#      path, or a folder the map describes as a whole), and every path the map names exists;
#   3. e2e: the e2e tests (those that start an Env, slurm-testenv or kube-testenv) that never
#      reach `assert_invariants`, directly or through a function of their test binary, are
#      exactly the doc's list of exceptions.
# The doc's tables sit between `<!-- check-architecture: NAME -->` and `<!-- /check-architecture -->`.
# Prints what it checked; exits 1 naming the file (and line) of each violation.
#
# Usage: hack/check-architecture.sh            run the checks
#        hack/check-architecture.sh --imports  also print which module imports which (counts)
set -euo pipefail
export LC_ALL=C

cd "$(dirname "$0")/.."
DOC=docs/architecture.md
SRC=crates/slurm-bridge/src
TESTS=crates/slurm-bridge/tests
SHOW_IMPORTS=0
[[ ${1:-} == --imports ]] && SHOW_IMPORTS=1

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() {
    echo "  FAIL $*"
    FAILED=1
}

# The doc's lines between `<!-- check-architecture: $1 -->` and the next end marker.
section() {
    local out
    out=$(awk -v name="$1" '
        $0 == "<!-- check-architecture: " name " -->" { on = 1; found = 1; next }
        on && $0 == "<!-- /check-architecture -->" { on = 0 }
        on { print }
        END { if (!found) exit 1 }' "$DOC") || {
        echo "$DOC: no section <!-- check-architecture: $1 -->" >&2
        exit 2
    }
    printf '%s\n' "$out"
}

# ---------------------------------------------------------------------------------------------
# 1. Layering
# ---------------------------------------------------------------------------------------------
echo "layering ($DOC \"Layers\" against every crate:: path in $SRC):"

# "module layer-number layer-name" from rows `| 1 | base | `wellknown`, `sync` | ... |`.
section layers | awk -F'|' '
    $2 ~ /^ *[0-9]+ *$/ {
        n = $2; gsub(/ /, "", n); name = $3; gsub(/^ +| +$/, "", name)
        mods = $4
        while (match(mods, /`[a-z0-9_]+`/)) {
            print substr(mods, RSTART + 1, RLENGTH - 2), n, name
            mods = substr(mods, RSTART + RLENGTH)
        }
    }' >"$WORK/layers"
# "file module" from rows `| `k8s/pod_writer/mod.rs` | `workload` | why |`.
section "layering exceptions" | awk -F'|' '
    $2 ~ /`/ && $3 ~ /`/ {
        f = $2; m = $3; gsub(/[ `]/, "", f); gsub(/[ `]/, "", m); print f, m
    }' >"$WORK/exceptions"

# The top-level modules: src's folders and files but the crate roots.
{
    find "$SRC" -mindepth 1 -maxdepth 1 -type d -printf '%f\n'
    find "$SRC" -mindepth 1 -maxdepth 1 -name '*.rs' ! -name lib.rs ! -name main.rs -printf '%f\n' |
        sed 's/\.rs$//'
} | sort -u >"$WORK/modules"
awk '{ print $1 }' "$WORK/layers" | sort >"$WORK/layered"
while read -r m; do
    grep -qx "$m" "$WORK/layered" || fail "$SRC: module $m is in no layer of the doc's table"
done <"$WORK/modules"
while read -r m; do fail "$DOC: module $m is in two layers"; done < <(uniq -d "$WORK/layered")
while read -r m; do
    grep -qx "$m" "$WORK/modules" || fail "$DOC: layer table names $m, which is no module of $SRC"
done <"$WORK/layered"

# "from to file:line" for every crate::<module> (and crate::{a, b}) outside comments.
find "$SRC" -name '*.rs' ! -path "$SRC/lib.rs" ! -path "$SRC/main.rs" | sort |
    xargs awk -v src="$SRC/" '
        FNR == 1 { f = substr(FILENAME, length(src) + 1); top = f; sub(/[/.].*/, "", top) }
        /^[[:space:]]*\/\// { next }
        {
            line = $0
            while (match(line, /crate::[{][^}]*[}]/)) {
                n = split(substr(line, RSTART + 8, RLENGTH - 9), parts, ",")
                for (i = 1; i <= n; i++) {
                    p = parts[i]; gsub(/^[[:space:]]+/, "", p); sub(/[^a-z0-9_].*/, "", p)
                    if (p != "" && p != top) print top, p, f ":" FNR
                }
                line = substr(line, RSTART + RLENGTH)
            }
            line = $0
            while (match(line, /crate::[a-z0-9_]+/)) {
                p = substr(line, RSTART + 7, RLENGTH - 7)
                if (p != top) print top, p, f ":" FNR
                line = substr(line, RSTART + RLENGTH)
            }
        }' >"$WORK/imports"

awk -v src="$SRC/" -v out="$WORK/used_exceptions" '
    FILENAME == ARGV[1] { layer[$1] = $2; lname[$1] = $3; next }
    FILENAME == ARGV[2] { allowed[$1 " " $2] = 1; next }
    {
        from = $1; to = $2; where = $3; file = where; sub(/:.*/, "", file)
        if (!(from in layer) || !(to in layer)) next   # reported above
        bad = ""
        if (layer[to] > layer[from])
            bad = from " (layer " layer[from] ", " lname[from] ") imports " to \
                  " (layer " layer[to] ", " lname[to] ")"
        else if (lname[from] == "components" && lname[to] == "components")
            bad = "component " from " imports component " to
        if (bad == "") next
        if ((file " " to) in allowed) { print file, to > out; next }
        print "  FAIL " src where ": " bad; failed = 1
    }
    END { exit failed }' "$WORK/layers" "$WORK/exceptions" "$WORK/imports" || FAILED=1
touch "$WORK/used_exceptions"
while read -r f m; do
    grep -qx "$f $m" "$WORK/used_exceptions" ||
        fail "$DOC: layering exception $f -> $m no longer occurs (remove it from the list)"
done <"$WORK/exceptions"
echo "  $(wc -l <"$WORK/imports") crate:: paths between $(wc -l <"$WORK/modules") modules in" \
    "$(awk '{ print $2 }' "$WORK/layers" | sort -u | wc -l) layers;" \
    "$(wc -l <"$WORK/exceptions") listed exceptions"
if ((SHOW_IMPORTS)); then
    echo "  imports (from -> to: crate:: paths):"
    awk '{ print "    " $1 " -> " $2 }' "$WORK/imports" | sort | uniq -c |
        awk '{ print "    " $2 " " $3 " " $4 ": " $1 }'
fi

# ---------------------------------------------------------------------------------------------
# 2. Module map
# ---------------------------------------------------------------------------------------------
echo "module map ($DOC \"Module map\" against the files of $SRC):"

# The map is a drawing: a name column (paths, comma-separated; `x/` opens a folder whose entries
# are indented below it) and a description column. Lines indented 20 or more continue a
# description. Prints "file PATH" and "dir PATH" (relative to src), or "bad LINE" for a line
# whose name column is not paths.
section "module map" | awk '
    /^```/ || /──/ || /^[[:space:]]*$/ { next }
    {
        ind = match($0, /[^ ]/) - 1
        if (ind >= 20) next
        names = substr($0, ind + 1); sub(/  .*/, "", names)
        n = split(names, e, ", ")
        for (i = 1; i <= n; i++)
            if (e[i] !~ /^[a-z0-9_]+(\/[a-z0-9_]+)*(\.rs|\/)$/) { print "bad " $0; next }
        while (depth > 0 && ind <= dind[depth]) depth--
        prefix = depth > 0 ? dpath[depth] : ""
        for (i = 1; i <= n; i++) print (e[i] ~ /\/$/ ? "dir " : "file ") prefix e[i]
        if (n == 1 && e[1] ~ /\/$/) { depth++; dind[depth] = ind; dpath[depth] = prefix e[1] }
    }' >"$WORK/map"
while read -r _ line; do
    fail "$DOC module map: cannot read the paths of: $line"
done < <(grep '^bad ' "$WORK/map" || true)
awk '$1 == "file" { print $2 }' "$WORK/map" | sort >"$WORK/map_files"
awk '$1 == "dir" { print $2 }' "$WORK/map" | sort >"$WORK/map_dirs"
# Folders described as a whole: no path of the map lies inside them.
while read -r d; do
    awk -v d="$d" 'substr($2, 1, length(d)) == d && $2 != d { inside = 1 } END { exit inside }' \
        "$WORK/map" && echo "$d"
done <"$WORK/map_dirs" >"$WORK/leaf_dirs"
(cd "$SRC" && find . -name '*.rs' | sed 's|^\./||' | sort) >"$WORK/src_files"
while read -r f; do
    grep -qxF "$f" "$WORK/map_files" && continue
    covered=0
    while read -r d; do [[ $f == "$d"* ]] && covered=1 && break; done <"$WORK/leaf_dirs"
    ((covered)) || fail "$SRC/$f: not in the module map"
done <"$WORK/src_files"
while read -r f; do [[ -f $SRC/$f ]] || fail "$DOC module map names $f, which does not exist"; done <"$WORK/map_files"
while read -r d; do [[ -d $SRC/$d ]] || fail "$DOC module map names $d, which does not exist"; done <"$WORK/map_dirs"
echo "  $(wc -l <"$WORK/src_files") files: $(wc -l <"$WORK/map_files") named," \
    "the rest in $(wc -l <"$WORK/leaf_dirs") folders described as a whole"

# ---------------------------------------------------------------------------------------------
# 3. E2e tests without assert_invariants
# ---------------------------------------------------------------------------------------------
echo "e2e tests without assert_invariants ($DOC list against $TESTS):"

# One test binary's files (its own, then the shared modules: folders without a main.rs).
# Prints "checked|unchecked FILE TEST" for each test that starts an environment.
cat >"$WORK/e2e.awk" <<'AWK'
function close_fn() { if (cur) { body[cur] = text; cur = 0 } }
/^[[:space:]]*\/\// { next }
{
    if (!cur) {
        if ($0 ~ /^[[:space:]]*#\[(tokio::)?test/) { test_attr = 1; next }
        if (match($0, /^[[:space:]]*(pub(\([a-z:]+\))? )?(async )?(const )?(unsafe )?fn [A-Za-z_][A-Za-z0-9_]*/)) {
            name = substr($0, RSTART, RLENGTH); sub(/.*fn /, "", name)
            ind = $0; sub(/[^ ].*/, "", ind)
            nfn++; cur = nfn; fname[nfn] = name; ffile[nfn] = FILENAME
            is_test[nfn] = test_attr; test_attr = 0; closing = ind "}"; text = ""
            if ($0 ~ /[;}][[:space:]]*$/) close_fn()   # a declaration, or a body on one line
            next
        }
        if ($0 !~ /^[[:space:]]*#\[/) test_attr = 0
        next
    }
    text = text "\n" $0
    if ($0 == closing) close_fn()
}
END {
    close_fn()
    for (i = 1; i <= nfn; i++) {
        b = body[i]
        if (b ~ /assert_invariants/) checks[fname[i]] = 1
        if (b ~ /Env::start|Instance::start/) starts[fname[i]] = 1
        while (match(b, /[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(/)) {
            c = substr(b, RSTART, RLENGTH); sub(/[[:space:]]*\($/, "", c)
            calls[fname[i] SUBSEP c] = 1
            b = substr(b, RSTART + RLENGTH)
        }
    }
    checks["assert_invariants"] = 1
    do {
        changed = 0
        for (k in calls) {
            split(k, p, SUBSEP)
            if ((p[2] in checks) && !(p[1] in checks)) { checks[p[1]] = 1; changed = 1 }
            if ((p[2] in starts) && !(p[1] in starts)) { starts[p[1]] = 1; changed = 1 }
        }
    } while (changed)
    for (i = 1; i <= nfn; i++)
        if (is_test[i] && (fname[i] in starts))
            print ((fname[i] in checks) ? "checked" : "unchecked"), ffile[i], fname[i]
}
AWK
(
    cd "$TESTS"
    shared=$(for d in */; do [[ -f $d/main.rs ]] || find "${d%/}" -name '*.rs'; done | sort)
    for bin in *.rs */main.rs; do
        if [[ $bin == */main.rs ]]; then own=$(find "${bin%/main.rs}" -name '*.rs' | sort); else own=$bin; fi
        # shellcheck disable=SC2086 # word splitting of the file lists is meant
        awk -f "$WORK/e2e.awk" $own $shared
    done
) >"$WORK/e2e"
awk '$1 == "unchecked" { print $2, $3 }' "$WORK/e2e" | sort >"$WORK/e2e_unchecked"
section "e2e without assert_invariants" | awk -F'|' '
    $2 ~ /`/ && $3 ~ /`/ { f = $2; t = $3; gsub(/[ `]/, "", f); gsub(/[ `]/, "", t); print f, t }' |
    sort >"$WORK/e2e_listed"
while read -r f t; do
    fail "$TESTS/$f: $t starts an environment and never reaches assert_invariants, and the doc does not list it"
done < <(comm -23 "$WORK/e2e_unchecked" "$WORK/e2e_listed")
while read -r f t; do
    fail "$DOC lists $f $t as an e2e test without assert_invariants: it is not (any more)"
done < <(comm -13 "$WORK/e2e_unchecked" "$WORK/e2e_listed")
e2e_all=$(wc -l <"$WORK/e2e")
e2e_checked=$(grep -c '^checked' "$WORK/e2e" || true)
e2e_unchecked=$(wc -l <"$WORK/e2e_unchecked")
# The prose above the list states the three counts; they must be today's.
stated=$(tr '\n' ' ' <"$DOC" | grep -o 'At this writing [0-9]* tests are e2e tests, [0-9]* reach *`assert_invariants`, and these [0-9]* do not' || true)
expected="At this writing $e2e_all tests are e2e tests, $e2e_checked reach \`assert_invariants\`, and these $e2e_unchecked do not"
if [[ ${stated//  / } != "$expected" ]]; then
    fail "$DOC states \"${stated:-no counts}\" above its list; the tests say \"$expected\""
fi
echo "  $e2e_all e2e tests: $e2e_checked reach" \
    "assert_invariants, $e2e_unchecked do not; $(wc -l <"$WORK/e2e_listed") listed"

if ((FAILED)); then
    echo "check-architecture: FAILED"
    exit 1
fi
echo "check-architecture: ok"
