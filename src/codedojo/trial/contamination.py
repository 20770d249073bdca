"""No history that holds the fix: find it in a task's environment (`scan`), and remove it before the agent runs
(`scrub`).

An agent that can read the fix from the repository solves the task without fixing anything: through Harbor, 21
of 100 SWE-bench Pro tasks were "solved" from git history, and SWE-rebench-style images can carry commits made
after the bug. What counts, in the task's workdir as the agent would first see it:

    future_commits       commits a ref (branch, tag, remote ref) reaches that HEAD does not
    reflog               reflog entries of commits that are not ancestors of HEAD
    stash                stashed changes
    remotes              configured remotes or remote-tracking refs (a fetch away from upstream)
    unreachable_objects  objects no ref reaches (what a reset or rebase leaves until gc)
    pip_cache            a non-empty pip cache (wheels or sources of other versions of the package)
    site_packages        a file the fix changes installed in site-packages as a copy that differs from the
                         workdir's (the package installed as released, with the fix in it)

`scan` runs PROBE in a started sandbox and returns one line per finding (`kind: detail`); `codedojo tasks check`
refuses a task with any. `scrub` runs SCRUB, which removes all of them but site-packages (which would need the
environment rebuilt: the check names it instead): stashes, remotes, refs that reach commits HEAD does not, the
reflog, unreachable objects (`git gc --prune=now`, run only when something was removed) and the pip caches. The
trial runner scrubs every environment whose workdir is a git repository before its agent starts
(`TrialOptions.scrub_history`); the tasks codedojo writes (bundled, synth) are built clean, and SWE-rebench
tasks, which run on prebuilt images, are scrubbed there.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from codedojo.sandbox.base import Sandbox

PROBE = r"""
cd "$1" 2>/dev/null || exit 0
shift
if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
    ahead=$(git rev-list --all --not HEAD 2>/dev/null | wc -l)
    [ "$ahead" -gt 0 ] && echo "future_commits: $ahead commit(s) reachable from refs but not from HEAD:" \
        "$(git for-each-ref --format='%(refname)' --no-merged HEAD 2>/dev/null | head -n 3 | tr '\n' ' ')"
    for commit in $(git reflog --all --format=%H 2>/dev/null | sort -u); do
        if ! git merge-base --is-ancestor "$commit" HEAD 2>/dev/null; then
            echo "reflog: entries of commits that are not ancestors of HEAD (e.g. $commit)"
            break
        fi
    done
    stashes=$(git stash list 2>/dev/null | wc -l)
    [ "$stashes" -gt 0 ] && echo "stash: $stashes stash entries"
    remotes=$(git remote 2>/dev/null | tr '\n' ' ')
    tracking=$(git for-each-ref --format='%(refname)' refs/remotes 2>/dev/null | wc -l)
    if [ -n "$remotes" ] || [ "$tracking" -gt 0 ]; then
        echo "remotes: ${remotes:-none configured}, $tracking remote-tracking ref(s)"
    fi
    unreachable=$(git fsck --unreachable --no-reflogs --no-progress 2>/dev/null | grep -c '^unreachable')
    [ "$unreachable" -gt 0 ] && echo "unreachable_objects: $unreachable object(s) no ref reaches"
fi
for cache in "$HOME/.cache/pip" /root/.cache/pip; do
    if [ -d "$cache" ] && [ -n "$(ls -A "$cache" 2>/dev/null)" ]; then
        echo "pip_cache: $cache is not empty"
        break
    fi
done
if [ "$#" -gt 0 ] && command -v python3 >/dev/null 2>&1; then
    for dir in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
        for path in "$@"; do
            installed="$dir/$path"
            if [ -f "$installed" ] && [ ! -L "$installed" ] && ! cmp -s "$installed" "$path"; then
                echo "site_packages: $path is installed as another version at $installed"
            fi
        done
    done
fi
exit 0
"""
"""Arguments: the workdir, then the paths the task's fix changes (for the site-packages check)."""

SCRUB = r"""
cd "$1" 2>/dev/null || exit 0
rm -rf "$HOME/.cache/pip" /root/.cache/pip 2>/dev/null
git rev-parse --verify -q HEAD >/dev/null 2>&1 || exit 0
changed=0
if [ -n "$(git stash list 2>/dev/null)" ]; then git stash clear; changed=1; fi
for remote in $(git remote 2>/dev/null); do git remote remove "$remote" >/dev/null 2>&1; changed=1; done
for ref in $(git for-each-ref --format='%(refname)' 2>/dev/null); do
    if ! git merge-base --is-ancestor "$ref" HEAD 2>/dev/null; then git update-ref -d "$ref"; changed=1; fi
done
for ref in $(git for-each-ref --format='%(refname)' refs/remotes 2>/dev/null); do
    git update-ref -d "$ref"; changed=1
done
for commit in $(git reflog --all --format=%H 2>/dev/null | sort -u); do
    if ! git merge-base --is-ancestor "$commit" HEAD 2>/dev/null; then
        git reflog expire --expire=now --all; changed=1
        break
    fi
done
if [ "$changed" = 1 ] || git fsck --unreachable --no-reflogs --no-progress 2>/dev/null | grep -q '^unreachable'; then
    git gc --prune=now --quiet 2>/dev/null
fi
exit 0
"""
"""Argument: the workdir. Cheap when there is nothing to remove (a few git reads, no gc)."""


async def scan(sandbox: Sandbox, *, changed_paths: Sequence[str] = (), timeout_sec: float = 120.0) -> list[str]:
    """The contamination PROBE finds in the sandbox's workdir, one `kind: detail` line each."""
    command = "sh -c " + shlex.join([PROBE, "probe", sandbox.workdir, *changed_paths])
    result = await sandbox.exec(command, timeout_sec=timeout_sec)
    return [line for line in result.stdout.splitlines() if ": " in line]


async def scrub(sandbox: Sandbox, *, timeout_sec: float = 600.0) -> None:
    """Remove what SCRUB removes from the sandbox's workdir (a no-op where there is nothing)."""
    await sandbox.exec("sh -c " + shlex.join([SCRUB, "scrub", sandbox.workdir]), timeout_sec=timeout_sec)
