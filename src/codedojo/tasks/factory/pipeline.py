"""From a repository to bug-fix tasks: order the mutation sites, test each mutant, keep the good ones.

A mutant becomes a task when, in a fresh copy of the repository, at least one test that passes on the
original fails on the mutant, no test hangs, and at least one failure can be told as behaviour. The
reference fix is the original file, whose full run is the baseline, so "the fix makes every graded
test pass" holds by construction: FAIL_TO_PASS and PASS_TO_PASS are drawn from the baseline's passes.

Determinism: sites are ordered by a seeded shuffle (bug kinds interleaved so every kind gets its turn),
mutants are tested in parallel but accepted strictly in that order, and nothing depends on timing. The
first k tasks of a repository are the same whatever the quota, so `--limit` gives a prefix of the suite.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import random
import shutil
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from codedojo.tasks.factory.harbor import TaskSpec, write_harbor_task
from codedojo.tasks.factory.mutations import Mutant, Site, apply_site, find_sites
from codedojo.tasks.factory.observations import Observation, observe
from codedojo.tasks.factory.operators import OPERATORS
from codedojo.tasks.factory.repository import Repository
from codedojo.tasks.factory.statements import (
    CURRICULUM_TIERS,
    TIERS,
    Location,
    fix_between,
    pick_observations,
    write_statement,
)
from codedojo.tasks.factory.testrun import TestRun, TestServer, run_tests

Runner = Callable[[Path], TestRun]
"""Runs the suite in a workspace directory."""

BUILTIN_REPOS = Path(__file__).parent.parent / "builtin" / "repos"


class FactoryError(RuntimeError):
    """The repository cannot be turned into tasks (its own suite fails, or it has no tests)."""


@dataclass(frozen=True)
class Candidate:
    """A mutant that passed every check."""

    mutant: Mutant
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    observations: tuple[Observation, ...]


def _copy_workspace(repo: Repository, dest: Path, *, replace: tuple[str, str] | None = None) -> None:
    for rel in repo.files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if replace is not None and rel == replace[0]:
            target.write_text(replace[1], encoding="utf-8")
        else:
            shutil.copyfile(repo.root / rel, target)


def baseline(repo: Repository, *, python: str | None = None) -> TestRun:
    """The suite on the unmodified repository; raises FactoryError when nothing passes."""
    with tempfile.TemporaryDirectory(prefix="codedojo-base-") as tmp:
        _copy_workspace(repo, Path(tmp))
        run = run_tests(Path(tmp), python=python)
    if not run.passed:
        raise FactoryError(
            f"{repo.root}: no test passes on the unmodified repository (pytest exit {run.exit_code}); "
            f"fix the suite or pass --python with its dependencies.\n{run.output}"
        )
    return run


def site_order(repo: Repository, *, seed: int) -> list[Site]:
    """All sites of the repository, shuffled by `seed`, one bug kind after another in turn."""
    rng = random.Random(f"{seed}/{repo.name}")
    by_kind: dict[str, list[Site]] = {kind: [] for kind in OPERATORS}
    for rel in repo.source_files:
        try:
            source = repo.read(rel).decode("utf-8")
            sites = find_sites(source, path=rel)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # not parseable by this Python: not a place to put bugs
        for site in sites:
            by_kind[site.kind].append(site)
    queues = [by_kind[kind] for kind in OPERATORS]
    for queue in queues:
        rng.shuffle(queue)
    rng.shuffle(queues)
    order: list[Site] = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop())
    return order


def _mutants(repo: Repository, sites: Sequence[Site]) -> Iterator[Mutant]:
    seen: set[str] = set()
    sources: dict[str, str] = {}
    for site in sites:
        source = sources.setdefault(site.path, repo.read(site.path).decode("utf-8"))
        mutant = apply_site(source, site=site)
        if mutant is None or mutant.source in seen:
            continue
        seen.add(mutant.source)
        yield mutant


def evaluate(mutant: Mutant, *, repo: Repository, base: TestRun, runner: Runner) -> Candidate | None:
    """Test `mutant` in a fresh copy; a Candidate when it makes a good task, else None."""
    with tempfile.TemporaryDirectory(prefix="codedojo-mutant-") as tmp:
        _copy_workspace(repo, Path(tmp), replace=(mutant.site.path, mutant.source))
        run = runner(Path(tmp))
    if run.timed_out:
        return None  # a hang makes grading slow and its symptom is "nothing happens": left out
    graded = sorted(base.passed)
    fail_to_pass = tuple(t for t in graded if run.outcomes.get(t) != "passed")
    pass_to_pass = tuple(t for t in graded if run.outcomes.get(t) == "passed")
    if not fail_to_pass:
        return None
    observations = []
    for test in fail_to_pass:
        failure = run.failures.get(test)
        if failure is None or failure.test_path is None:
            continue
        test_source = repo.read(failure.test_path).decode("utf-8")
        observations.append(observe(failure, test_id=test, test_source=test_source))
    if not observations:
        return None  # e.g. an import error: every test vanished, nothing to describe
    return Candidate(mutant, fail_to_pass, pass_to_pass, tuple(pick_observations(observations)))


def find_candidates(
    repo: Repository,
    *,
    seed: int,
    quota: int,
    workers: int,
    python: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Candidate]:
    """The first `quota` good mutants in site order, testing up to `workers` at a time.

    `on_progress(accepted, tested)` is called after each mutant is judged.
    """
    base = baseline(repo, python=python)
    mutants = _mutants(repo, site_order(repo, seed=seed))
    servers: list[TestServer] = []
    local = threading.local()

    def runner(workdir: Path) -> TestRun:
        # One fork server per worker thread (a server runs one suite at a time).
        if not hasattr(local, "server"):
            local.server = TestServer(python=python)
            servers.append(local.server)
        return local.server.run(workdir)

    try:
        return _accept_in_order(repo, mutants, base, runner, quota=quota, workers=workers, on_progress=on_progress)
    finally:
        for server in servers:
            server.close()


def remembered_candidates(
    repo: Repository,
    *,
    seed: int,
    quota: int,
    workers: int,
    cache: Path | None,
    python: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Candidate]:
    """`find_candidates`, remembered in the folder `cache` (None: not remembered).

    A repository's candidates are a fixed sequence of which any quota takes a prefix (the module's determinism),
    so one file per (factory code, repository content, seed, interpreter) holds the longest list found so far,
    and whether the repository's mutants ran out before it; a quota it covers is served from it without running
    a test. The three curriculum tiers restate the same bugs, so generating the second and third costs no search.
    An unreadable file is searched again and replaced."""
    if cache is None:
        return find_candidates(repo, seed=seed, quota=quota, workers=workers, python=python, on_progress=on_progress)
    path = cache / f"{repo.name}-{_candidate_key(repo, seed=seed, python=python)}.pickle"
    stored: tuple[list[Candidate], bool] | None = None
    try:
        with path.open("rb") as f:
            stored = pickle.load(f)  # our own cache folder, written below
    except FileNotFoundError:
        pass
    except Exception:  # a truncated or stale file (unpickling raises many kinds): searched again below
        stored = None
    if stored is not None and (len(stored[0]) >= quota or stored[1]):
        found = stored[0][:quota]
        if on_progress is not None:
            on_progress(len(found), 0)
        return found
    found = find_candidates(repo, seed=seed, quota=quota, workers=workers, python=python, on_progress=on_progress)
    if stored is None or len(found) > len(stored[0]) or len(found) < quota:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        with tmp.open("wb") as f:
            pickle.dump((found, len(found) < quota), f)
        tmp.replace(path)
    return found


def _candidate_key(repo: Repository, *, seed: int, python: str | None) -> str:
    """What a repository's candidates depend on: the factory's code, the repository's files, the seed, the
    interpreter that runs the tests."""
    digest = hashlib.sha256(f"{seed}\0{python or ''}\0".encode())
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    for rel in repo.files:
        digest.update(rel.encode() + b"\0" + repo.read(rel) + b"\0")
    return digest.hexdigest()[:20]


def _accept_in_order(
    repo: Repository,
    mutants: Iterator[Mutant],
    base: TestRun,
    runner: Runner,
    *,
    quota: int,
    workers: int,
    on_progress: Callable[[int, int], None] | None,
) -> list[Candidate]:
    accepted: list[Candidate] = []
    used_lines: set[tuple[str, int]] = set()
    tested = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        window: list[tuple[Mutant, Future[Candidate | None]]] = []
        while len(accepted) < quota:
            while len(window) < 2 * max(1, workers):
                mutant = next(mutants, None)
                if mutant is None:
                    break
                window.append((mutant, pool.submit(evaluate, mutant, repo=repo, base=base, runner=runner)))
            if not window:
                break
            mutant, future = window.pop(0)
            result = future.result()
            tested += 1
            line = (mutant.site.path, mutant.lineno)
            if result is not None and line not in used_lines:
                used_lines.add(line)  # one bug per line keeps the suite varied
                accepted.append(result)
            if on_progress is not None:
                on_progress(len(accepted), tested)
        for _, future in window:
            future.cancel()
    return accepted


def tier_for(repo: Repository, index: int, *, seed: int) -> str:
    offset = zlib.crc32(f"{seed}/{repo.name}".encode()) % len(TIERS)
    return TIERS[(index + offset) % len(TIERS)]


def specs_for(repo: Repository, candidates: Sequence[Candidate], *, seed: int, source: str,
              tier: str | None = None) -> list[TaskSpec]:
    """The tasks of one repository's accepted mutants, in candidate order: each in the tier dealt to it, or,
    for a curriculum `tier`, only the warm-up tier's bugs, each restated in that tier's words (same mutant,
    same tests; the task keeps its candidate index). `codedojo tasks builtin` and the bundled-suite ingest
    both build their tasks here."""
    if tier not in CURRICULUM_TIERS:
        return [task_spec(repo, c, index=i, seed=seed, source=source) for i, c in enumerate(candidates)]
    return [task_spec(repo, c, index=i, seed=seed, source=source, restate=tier)
            for i, c in enumerate(candidates) if tier_for(repo, i, seed=seed) == "warmup"]


def task_spec(repo: Repository, candidate: Candidate, *, index: int, seed: int, source: str,
              restate: str | None = None) -> TaskSpec:
    """The task for one accepted mutant. Its tier is dealt round-robin (`tier_for`); with `restate` (a
    curriculum tier), a warm-up tier bug is written in that tier's statement style instead."""
    mutant = candidate.mutant
    tier = tier_for(repo, index, seed=seed)
    if restate is not None:
        if restate not in CURRICULUM_TIERS:
            raise ValueError(f"cannot restate as {restate!r}: curriculum tiers are {', '.join(CURRICULUM_TIERS)}")
        if tier != "warmup":
            raise ValueError(f"only warm-up tier bugs are restated; {repo.name} #{index} is {tier}")
        tier = restate
    name = f"{repo.name}-{index:03d}-{tier}"
    original_source = repo.read(mutant.site.path).decode("utf-8")
    buggy_lines = mutant.source.splitlines()
    line_text = buggy_lines[mutant.lineno - 1].strip() if mutant.lineno <= len(buggy_lines) else ""
    location = Location(
        path=mutant.site.path,
        line=mutant.lineno,
        line_text=line_text,
        function=mutant.function,
        missing=mutant.site.kind == "dropped_statement",
        bug_kind=mutant.site.kind,
        fix=fix_between(mutant.source, original_source) if tier == "guided" else None,
    )
    instruction = write_statement(
        tier=tier,
        repo=repo.name,
        observations=candidate.observations,
        location=location,
        seed=f"{seed}/{name}",
    )
    return TaskSpec(
        name=name,
        repository=repo.name,
        tier=tier,
        bug_kind=mutant.site.kind,
        seed=seed,
        source=source,
        instruction=instruction,
        path=mutant.site.path,
        line=mutant.lineno,
        function=mutant.function,
        buggy_source=mutant.source,
        original_source=original_source,
        fail_to_pass=candidate.fail_to_pass,
        pass_to_pass=candidate.pass_to_pass,
    )


def quota_for(limit: int | None, *, num_repos: int, per_repo: int, tier: str | None) -> int:
    """Mutants to find per repository so that `limit` tasks (of `tier`, if given) come out."""
    if limit is None:
        return per_repo
    needed = math.ceil(limit / num_repos) * (len(TIERS) if tier else 1)
    return min(per_repo, needed + (len(TIERS) if tier else 0))


def write_suite(
    repos: Sequence[Repository],
    specs_by_repo: Sequence[Sequence[TaskSpec]],
    out: Path,
    *,
    tier: str | None,
    limit: int | None,
) -> list[Path]:
    """Write tasks round-robin over repositories (so a limited suite spans them all)."""
    chosen: list[TaskSpec] = []
    depth = max((len(s) for s in specs_by_repo), default=0)
    for i in range(depth):
        for specs in specs_by_repo:
            if i < len(specs) and (tier is None or specs[i].tier == tier):
                chosen.append(specs[i])
    if limit is not None:
        chosen = chosen[:limit]
    by_name = {repo.name: repo for repo in repos}
    written = []
    for spec in sorted(chosen, key=lambda s: s.name):
        repo = by_name[spec.repository]
        repo_files = {rel: repo.read(rel) for rel in repo.files}
        restore = tuple(sorted(set(repo.test_files) | set(repo.support_files)))
        written.append(write_harbor_task(spec, out=out, repo_files=repo_files, restore=restore).path)
    return written
