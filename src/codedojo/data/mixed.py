"""Mixed-reward filter: keep the tasks whose probe episodes were all gradeable and 0 < successes < n.

A group whose rewards are all equal gives GRPO a zero advantage for every episode: such tasks cost
rollout time and teach nothing. The filter reads the probe's counts file only (no episode is run), so it
can be rerun at will. The subset is written as `<source>-mixed-reward-<slug>-n<n>.jsonl` in source order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from codedojo.data.probe import TaskCounts, load_counts, model_slug, summarize
from codedojo.data.provenance import describe_input, write_provenance
from codedojo.data.rows import Row, difficulty, load_rows, row_key, save_rows

CRITERION = "all n episodes gradeable and 0 < solved < n"


def is_mixed(counts: TaskCounts, *, n: int) -> bool:
    return counts.total == counts.valid == n and 0 < counts.solved < n


def mixed_name(source: Path, *, slug: str, n: int) -> str:
    """`train-300.jsonl` -> `train-300-mixed-reward-<slug>-n<n>`."""
    return f"{Path(source).name.removesuffix('.jsonl')}-mixed-reward-{slug}-n{n}"


@dataclass(frozen=True, kw_only=True)
class TierLine:
    tier: str
    probed: int
    """Tasks whose n episodes all have a valid reward."""
    kept: int
    all_failed: int
    all_solved: int
    incomplete: int
    """Tasks with fewer than n valid episodes (not probed to the end, or infrastructure failures)."""


@dataclass(frozen=True, kw_only=True)
class MixedReport:
    path: Path
    n: int
    rows: list[Row]
    tiers: list[TierLine]
    histogram: dict[str, int]

    def text(self) -> str:
        out = [f"{self.path.name}: kept {len(self.rows)} tasks ({CRITERION}, n={self.n}) -> {self.path}"
               + ("" if self.rows else "\n  no task has mixed rewards: probe easier tasks or a stronger model"),
               "tasks by successes (k of n): " + ", ".join(f"{k}: {v}" for k, v in self.histogram.items()),
               f"  {'tier':<10} {'probed':>7} {'kept':>5} {'all-fail':>9} {'all-pass':>9} {'incomplete':>11}"]
        for t in self.tiers:
            out.append(f"  {t.tier:<10} {t.probed:>7} {t.kept:>5} {t.all_failed:>9} {t.all_solved:>9} "
                       f"{t.incomplete:>11}")
        return "\n".join(out)


def tier_lines(rows: Sequence[Row], counts: Mapping[str, TaskCounts], *, n: int) -> list[TierLine]:
    tally: dict[str, Counter[str]] = {}
    for row in rows:
        c = counts.get(row_key(row))
        kind = "incomplete" if c is None or c.total != n or c.valid != n else \
            "all_failed" if c.solved == 0 else "all_solved" if c.solved == n else "kept"
        tally.setdefault(difficulty(row), Counter())[kind] += 1
    return [TierLine(tier=tier, probed=t["kept"] + t["all_failed"] + t["all_solved"], kept=t["kept"],
                     all_failed=t["all_failed"], all_solved=t["all_solved"], incomplete=t["incomplete"])
            for tier, t in sorted(tally.items())]


def mixed_subset(source: Path, *, probe: Path, slug: str | None = None, allow_partial: bool = False) -> MixedReport:
    """Write the mixed-reward subset of `source` from the probe counts at `probe`.

    Every task of `source` must have been probed to the end unless `allow_partial`, which keeps mixed
    tasks among those that were and reports the rest as incomplete.
    """
    source, probe = Path(source), Path(probe)
    rows = load_rows(source)
    n, model, counts = load_counts(probe)
    missing = [row_key(r) for r in rows if row_key(r) not in counts or counts[row_key(r)].total != n]
    if missing and not allow_partial:
        raise ValueError(f"{probe} lacks complete probes of {len(missing)} of the {len(rows)} tasks of {source} "
                         f"(e.g. {missing[0]}); rerun `codedojo dataset probe` on {source.name} (it resumes), or "
                         "allow a partial subset")
    # An empty subset is still written (with its report): "the model solves none of these" is a finding.
    kept = [r for r in rows if row_key(r) in counts and is_mixed(counts[row_key(r)], n=n)]
    slug = slug or f"{model_slug(model)}-agentic"
    path = save_rows(source.with_name(mixed_name(source, slug=slug, n=n) + ".jsonl"), kept)
    probed = {row_key(r): counts[row_key(r)] for r in rows if row_key(r) in counts}
    tiers = tier_lines(rows, counts, n=n)
    histogram = summarize(probed, n=n)["success_histogram"]
    write_provenance(path, stage="mixed", inputs=[describe_input(source), describe_input(probe)], model=model,
                     settings={"criterion": CRITERION, "n": n, "slug": slug, "allow_partial": allow_partial},
                     counts={"input": len(rows), "kept": len(kept), "incomplete": len(missing),
                             "success_histogram": histogram, "kept_tasks": [row_key(r) for r in kept],
                             "tiers": {t.tier: {"probed": t.probed, "kept": t.kept, "all_failed": t.all_failed,
                                                "all_solved": t.all_solved, "incomplete": t.incomplete}
                                       for t in tiers}})
    return MixedReport(path=path, n=n, rows=kept, tiers=tiers, histogram=histogram)
