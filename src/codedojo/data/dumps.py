"""Probe counts from episodes that were already run: the tutorial's eval-dump workflow.

Two sources: a rollout dump `rollout_eval_<step>.pt` (a training run with `save_debug_rollout_data`
writes one record per eval episode; codedojo's local trainer and slime use the same `Sample` field
names), or the folder of trajectory files `codedojo eval --trajectories DIR` writes. Evaluating the probe
subset with n samples per task and reading either gives the same counts file as `codedojo dataset probe`,
at no extra cost when the evaluation was run anyway.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codedojo.data.probe import counts_from_records, probe_stem, save_counts, summarize
from codedojo.data.provenance import describe_input, write_provenance
from codedojo.data.rows import Row, load_rows, metadata, row_key


def _solved(sample: Mapping[str, Any]) -> bool:
    meta = sample.get("metadata") or {}
    if "solved" in meta:
        return bool(meta["solved"])
    agentic = meta.get("agentic") or {}  # the slime fork's generate records is_solved here
    if "is_solved" in agentic:
        return bool(agentic["is_solved"])
    return (sample.get("reward") or 0.0) >= 1.0


def records_from_samples(samples: Sequence[Mapping[str, Any]], rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Episode records ({task, sample, valid, solved, status}) for the dump's samples of `rows`' tasks.

    A sample names its task by metadata.instance_id or its label (the task directory's name); both are
    matched against the rows.
    """
    names: dict[str, str] = {}
    for row in rows:
        names[row_key(row)] = row_key(row)
        names[str(row.get("label") or row_key(row))] = row_key(row)
        names[Path(str(metadata(row).get("task_path") or "")).name] = row_key(row)
    seen: Counter[str] = Counter()
    records = []
    for sample in samples:
        meta = sample.get("metadata") or {}
        task = names.get(str(meta.get("instance_id") or "")) or names.get(str(sample.get("label") or ""))
        if task is None:
            continue
        valid = not sample.get("remove_sample", False) and sample.get("reward") is not None
        records.append({"task": task, "sample": seen[task], "valid": valid, "solved": valid and _solved(sample),
                        "status": meta.get("episode_status") or sample.get("status")})
        seen[task] += 1
    return records


def load_samples(dump: Path) -> list[dict[str, Any]]:
    """The episodes of a rollout dump (.pt), or of a folder of trajectory files, as Sample-like dicts."""
    dump = Path(dump)
    if dump.is_dir():
        samples = []
        for path in sorted(dump.glob("*.json")):
            data = json.loads(path.read_text(encoding="utf-8"))
            rewards, meta = data.get("rewards"), data.get("metadata") or {}
            # The episode's own verdicts; files written before they were recorded fall back on the rewards.
            valid = meta["valid"] if "valid" in meta else rewards is not None
            solved = meta["solved"] if "solved" in meta else bool(rewards) and rewards.get("reward", 0.0) >= 1.0
            samples.append({"label": data.get("task_name"), "reward": data.get("reward"), "remove_sample": not valid,
                            "metadata": {"solved": solved, "episode_status": data.get("status")}})
        return samples
    if not dump.is_file():
        raise FileNotFoundError(f"{dump}: no such rollout dump or trajectory folder")
    import torch

    payload = torch.load(dump, map_location="cpu", weights_only=True)  # data only: no pickled code runs
    stored = payload.get("samples") if isinstance(payload, dict) else None
    if not isinstance(stored, list):
        raise ValueError(f"{dump}: not a rollout dump (expected a dict with a 'samples' list)")
    return stored


def probe_from_dump(source: Path, *, dump: Path, model: str, n: int) -> Path:
    """Counts for the tasks of `source` from a dump (or trajectory folder) of an evaluation with n samples
    per task."""
    source, dump = Path(source), Path(dump)
    samples = load_samples(dump)
    rows = load_rows(source)
    counts = counts_from_records(records_from_samples(samples, rows))
    wrong = [k for k, c in counts.items() if c.total != n]
    if wrong:
        raise ValueError(f"{dump} is not an evaluation with n={n} samples per task ({wrong[0]} has "
                         f"{counts[wrong[0]].total}); evaluate {source.name} with n_samples_per_eval_prompt={n}")
    if not counts:
        raise ValueError(f"{dump} holds no episode of the tasks of {source}")
    stem = probe_stem(source, model=model, n=n)
    out = save_counts(stem.with_name(stem.name + ".json"), counts, n=n, model=model)
    write_provenance(out, stage="probe", model=model, inputs=[describe_input(source), describe_input(dump)],
                     settings={"n": n, "from_dump": str(dump)}, counts=summarize(counts, n=n))
    return out
