#!/usr/bin/env bash
# One timed run of the README's first command from a fresh clone, as issue 40 measures the main job:
#
#   bench/fresh_clone_run.sh OUT.json [ARGS for ./dev run, e.g. --eval-size 48x2]
#
# Clones this checkout's HEAD into a new folder under ${TMPDIR:-/tmp}, runs `./dev run --run-dir RUN ARGS` there
# under `/usr/bin/time -v` with an empty CODEDOJO_CACHE_DIR (so the venv, the task suite, the demonstrations,
# the SFT warm start and every evaluation are built as on a new machine), then writes OUT.json: what ran, the
# commit, the CPU, start and end time, the load average before and after, and bench/default_run.py's figures
# (per-step rollout, update and engine seconds, the evaluations, the warm start, wall clock, peak RSS). Run it
# alone: anything beside it is in its time. The clone, its run directory and logs are kept (the path is printed).
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: bench/fresh_clone_run.sh OUT.json [ARGS for ./dev run]" >&2; exit 2; }
out=$(realpath -m "$1")
shift
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse --short HEAD)
[[ -z $(git -C "$repo" status --porcelain --untracked-files=no) ]] \
    || echo "note: $repo has uncommitted changes; the clone runs HEAD ($commit) without them" >&2
timer=${TIME_BIN:-/usr/bin/time}  # GNU time (Debian: apt-get install time)
[[ -x $timer ]] || { echo "$timer not found: apt-get install time (GNU time gives the wall clock and peak RSS)" >&2
                     exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/codedojo-fresh-$commit.XXXXXX")
echo "fresh clone of $commit in $work" >&2
git clone --quiet "$repo" "$work/clone"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%FT%TZ)
cd "$work/clone"
set +e
CODEDOJO_CACHE_DIR="$work/cache" "$timer" -v -o "$work/time.log" ./dev run --run-dir "$work/run" "$@" \
    > >(tee "$work/run.log") 2>&1
status=$?
set -e
ended=$(date -u +%FT%TZ)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
[[ $status -eq 0 ]] || { echo "./dev run failed (exit $status): $work/run.log" >&2; exit "$status"; }
.venv/bin/python bench/default_run.py "$work/run" --cache "$work/cache" --time-log "$work/time.log" \
    > "$work/figures.json"
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') \
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*\|avx2' | sort -u | tr '\n' ' ') \
.venv/bin/python - "$work/figures.json" "$out" "$commit" "$started" "$ended" "$load_before" "$load_after" \
    "$work" "$*" <<'EOF'
import json, os, sys
figures, out, commit, started, ended, before, after, work, args = sys.argv[1:]
result = {"what": "./dev run from a fresh clone (bench/fresh_clone_run.sh), an empty CODEDOJO_CACHE_DIR",
          "command": f"bench/fresh_clone_run.sh OUT.json {args}".strip(), "commit": commit,
          "cpu": os.environ["CPU"], "cpu_flags": os.environ["FLAGS"].split(), "cores": os.cpu_count(),
          "started": started, "ended": ended, "load_average_before": [float(x) for x in before.split()],
          "load_average_after": [float(x) for x in after.split()], "work_folder": work,
          **json.loads(open(figures).read())}
open(out, "w").write(json.dumps(result, indent=1) + "\n")
print(f"wrote {out}: wall clock {result.get('wall_clock')}, peak RSS {result.get('peak_rss_gib')} GiB")
EOF
