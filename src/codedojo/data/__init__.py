"""The dataset pipeline: from a task source to the JSONL subsets a training run reads.

Stages (one module each, each also a `codedojo dataset <stage>` subcommand): ingest, prefilter,
validation (oracle twice, nop once), split (repository-disjoint, balanced), sample, probe (n episodes
per task with a frozen model) and mixed (keep tasks with 0 < successes < n). Stages that run tasks
append each finished result to a JSONL sidecar and skip what it holds when rerun; every output gets a
provenance record next to it. docs/dataset.md describes the files.
"""
