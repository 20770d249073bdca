"""Sample: N tasks of a set (train-300 from train-full, eval-4 from eval), balanced by language and
difficulty with the guarantee of codedojo.data.balance, deterministic from the seed."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from codedojo.data.balance import Balance, StratumLine, apportion, format_lines, max_deviation, pick, target_weights
from codedojo.data.balance import balance_lines as _lines
from codedojo.data.provenance import describe_input, write_provenance
from codedojo.data.rows import Row, load_rows, repository, save_rows, stratum
from codedojo.data.split import SplitError


@dataclass(frozen=True, kw_only=True)
class SampleReport:
    path: Path
    rows: list[Row]
    balance: list[StratumLine]

    def text(self) -> str:
        repos = len({repository(r) for r in self.rows})
        return "\n".join([
            f"{self.path.name}: {len(self.rows)} tasks from {repos} repositories -> {self.path}",
            format_lines(self.balance, title="balance (target = size x weight):"),
            f"  max |count - target| = {max_deviation(self.balance):.2f} (guaranteed <= 1 unless a stratum is "
            "marked short)",
        ])


def sample_name(source: Path, size: int) -> str:
    """train-full.jsonl -> train-<size>; eval.jsonl -> eval-<size>; x.jsonl -> x-<size>."""
    stem = Path(source).name.removesuffix(".jsonl").removesuffix("-full")
    return f"{stem}-{size}"


def sample_rows(rows: list[Row], *, size: int, seed: int = 0, balance: Balance = "proportional") -> list[Row]:
    """`size` rows, balanced (see codedojo.data.balance), in input order."""
    if not 0 < size <= len(rows):
        raise SplitError(f"sample size must be between 1 and {len(rows)} (the input has {len(rows)} tasks), "
                         f"got {size}")
    weights = target_weights(rows, balance=balance)
    quotas = apportion(size, weights, caps=Counter(stratum(r) for r in rows))
    chosen = {id(r) for r in pick(rows, quotas, rng=random.Random(seed))}
    return [r for r in rows if id(r) in chosen]


def sample_dataset(source: Path, *, size: int, name: str | None = None, seed: int = 0,
                   balance: Balance = "proportional") -> SampleReport:
    """Write `<name>.jsonl` (default train-N / eval-N) beside `source`, with provenance."""
    source = Path(source)
    rows = load_rows(source)
    chosen = sample_rows(rows, size=size, seed=seed, balance=balance)
    path = save_rows(source.with_name(f"{name or sample_name(source, size)}.jsonl"), chosen)
    lines = _lines(chosen, rows, size=size, weights=target_weights(rows, balance=balance))
    write_provenance(path, stage="sample", inputs=[describe_input(source)], seed=seed,
                     settings={"size": size, "balance": balance, "tolerance": "|count - target| <= 1 per stratum"},
                     counts={"tasks": len(chosen), "strata": {f"{x.stratum[0]}/{x.stratum[1]}": x.count
                                                              for x in lines}})
    return SampleReport(path=path, rows=chosen, balance=lines)
