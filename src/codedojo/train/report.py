"""`codedojo report RUN_DIR`: one static HTML page with the run's curves and a browser of its episodes.

The page has no external resources: curves are inline SVG drawn here, the episode browser is a few
lines of plain JavaScript over the episodes embedded as JSON (the latest steps, capped in size).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from codedojo.train.observability import read_metrics

MAX_EPISODES = 400
STAGE_NAMES = ("baseline", "start", "trained")
"""What a summary calls the baseline, the start model and the trained model unless the run names them."""
CHARTS = (
    ("sft/loss", "supervised loss"),
    ("rollout/reward_mean", "train reward (mean over valid episodes)"),
    ("rollout/solved_frac", "solved fraction"),
    ("rollout/mixed_group_frac", "groups with mixed rewards (GRPO's signal)"),
    ("rollout/flagged_frac", "episodes flagged for reward hacking (share)"),
    ("train/loss", "policy loss"),
    ("train/train_rollout_logprob_abs_diff", "trainer vs sampler |logprob diff|"),
    ("rollout/turns_mean", "turns per episode"),
    ("perf/step_seconds", "seconds per step"),
    ("perf/engine_idle_frac", "engine idle during the rollout (share: every episode on its sandbox)"),
)


def _svg_chart(title: str, series: dict[str, list[tuple[float, float]]], *, width: int = 460,
               height: int = 220, errors: dict[str, dict[float, float]] | None = None) -> str:
    """A line chart; `errors` (series -> x -> half-height) draws error bars."""
    points = [p for values in series.values() for p in values]
    if not points:
        return ""
    errors = errors or {}
    spans = [(y - e, y + e) for name, values in series.items() for x, y in values
             if (e := errors.get(name, {}).get(x))]
    xs = [p[0] for p in points]
    ys = [p[1] for p in points] + [y for span in spans for y in span]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = 40

    def sx(x: float) -> float:
        return pad + (x - x0) / (x1 - x0) * (width - 2 * pad)

    def sy(y: float) -> float:
        return height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)

    colors = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1")
    parts = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad}" y="16" class="title">{html.escape(title)}</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" class="axis"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" class="axis"/>',
             f'<text x="{pad - 4}" y="{sy(y1) + 4:.1f}" class="tick" text-anchor="end">{y1:.3g}</text>',
             f'<text x="{pad - 4}" y="{sy(y0) + 4:.1f}" class="tick" text-anchor="end">{y0:.3g}</text>',
             f'<text x="{sx(x0):.1f}" y="{height - pad + 14}" class="tick">{x0:g}</text>',
             f'<text x="{sx(x1):.1f}" y="{height - pad + 14}" class="tick" text-anchor="end">{x1:g}</text>']
    for i, (name, values) in enumerate(series.items()):
        color = colors[i % len(colors)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(values))
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in values]
        for x, y in values:
            if err := errors.get(name, {}).get(x):
                parts.append(f'<line class="errorbar" x1="{sx(x):.1f}" y1="{sy(y - err):.1f}" x2="{sx(x):.1f}" '
                             f'y2="{sy(y + err):.1f}" stroke="{color}" stroke-width="1.5"/>')
        parts.append(f'<text x="{width - pad}" y="{16 + 14 * i}" class="legend" fill="{color}" '
                     f'text-anchor="end">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _svg_bars(title: str, bars: list[tuple[str, float, float | None]], *, width: int = 460, height: int = 220) -> str:
    """Bars of (label, value, half-height of the error bar or None) on a 0-1 scale (pass@1)."""
    if not bars:
        return ""
    pad, top = 40, max(1.0, max(v + (e or 0.0) for _, v, e in bars))
    slot = (width - 2 * pad) / len(bars)

    def sy(y: float) -> float:
        return height - pad - max(0.0, y) / top * (height - 2 * pad)

    parts = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad}" y="16" class="title">{html.escape(title)}</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" class="axis"/>',
             f'<text x="{pad - 4}" y="{sy(top) + 4:.1f}" class="tick" text-anchor="end">{top:.3g}</text>',
             f'<text x="{pad - 4}" y="{sy(0) + 4:.1f}" class="tick" text-anchor="end">0</text>']
    for i, (label, value, err) in enumerate(bars):
        x = pad + i * slot + slot * 0.2
        w = slot * 0.6
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{sy(value):.1f}" width="{w:.1f}" '
                     f'height="{sy(0) - sy(value):.1f}" fill="#2b6cb0"/>')
        parts.append(f'<text x="{x + w / 2:.1f}" y="{height - pad + 14}" class="tick" text-anchor="middle">'
                     f'{html.escape(label)}</text>')
        parts.append(f'<text x="{x + w / 2:.1f}" y="{sy(value) - 4:.1f}" class="tick" text-anchor="middle">'
                     f'{value:.3f}</text>')
        if err:
            parts.append(f'<line class="errorbar" x1="{x + w / 2:.1f}" y1="{sy(value - err):.1f}" x2="{x + w / 2:.1f}" '
                         f'y2="{sy(value + err):.1f}" stroke="#c05621" stroke-width="1.5"/>')
    parts.append("</svg>")
    return "".join(parts)


def stage_bars(summary: dict[str, Any]) -> list[str]:
    """learning.json's per-set pass@1 of the baseline, the start and the trained model as bar charts with
    +- one standard error, one chart per eval set that has a baseline or a before and after."""
    names = summary.get("stage_names") or STAGE_NAMES
    charts = []
    for name, entry in summary.get("eval", {}).items():
        bars = []
        for key, label in (("baseline", names[0]), ("before", names[1]), ("after", names[2])):
            stage = entry.get(key)
            if stage is None or stage.get("pass@1") is None or (key == "after" and "gain" not in entry):
                continue
            if key == "before" and stage["step"] != 0:
                label = f"step {stage['step']}"
            bars.append((label, float(stage["pass@1"]), stage.get("stderr")))
        if len(bars) > 1:
            charts.append(_svg_bars(f"{name}: pass@1 (bars: +- one standard error over tasks)", bars))
    return charts


def noise_words(mean: float | None, stderr: float | None) -> str:
    """Whether a paired difference is beyond two of its standard errors, in words a user reads at a glance."""
    if mean is None or stderr is None:
        return "no standard error (too few tasks)"
    if stderr == 0.0:
        return "no spread to judge it by" if mean == 0.0 else "beyond noise (no spread between tasks)"
    ratio = abs(mean) / stderr
    if ratio > 2:
        return f"beyond noise ({ratio:.1f} standard errors, {'a gain' if mean > 0 else 'a loss'})"
    return f"within noise ({ratio:.1f} standard errors; more than 2 would be a real change)"


def learning_lines(summary: dict[str, Any]) -> list[str]:
    """The end-of-run summary (`train.run_records.RunRecords.finish`) as printable lines."""

    def num(x: float | None, sign: bool = False) -> str:
        return "-" if x is None else (f"{x:+.3f}" if sign else f"{x:.3f}")

    def versus(diff: dict[str, Any], later: str, earlier: str) -> str:
        """`later - earlier: +x +- se (paired over T tasks): beyond/within noise`."""
        return (f"{later} - {earlier}: {num(diff['mean'], True)} +- {num(diff['stderr'])} (paired over "
                f"{diff['tasks']} tasks): {noise_words(diff['mean'], diff['stderr'])}")

    lines = []
    base_name, start_name, trained_name = summary.get("stage_names") or STAGE_NAMES
    for name, entry in summary["eval"].items():
        before, after, base = entry.get("before"), entry.get("after"), entry.get("baseline")
        if base is None and before is not None and after is not None:  # no baseline: the one-line form
            line = (f"eval set {name}: pass@1 {num(before['pass@1'])} +- {num(before['stderr'])} (step "
                    f"{before['step']}) -> {num(after['pass@1'])} +- {num(after['stderr'])} (step {after['step']})")
            if "gain" in entry:
                gain = entry["gain"]
                line += f"; gain {num(gain['mean'], True)} +- {num(gain['stderr'])} (paired over {gain['tasks']} tasks)"
                line += ": " + noise_words(gain["mean"], gain["stderr"])
            lines.append(line)
            continue
        lines.append(f"eval set {name}: pass@1 +- its standard error over tasks")
        if base is not None:
            lines.append(f"  {base_name} ({base['model']}): {num(base['pass@1'])} +- {num(base['stderr'])}")
        first = start_name
        if before is not None:
            first = start_name if before["step"] == 0 else f"step {before['step']}"
            lines.append(f"  {first} (step {before['step']}): {num(before['pass@1'])} +- {num(before['stderr'])}")
        if after is not None and "gain" in entry:
            lines.append(f"  {trained_name} (step {after['step']}): {num(after['pass@1'])} +- {num(after['stderr'])}")
            lines.append(f"  the gain, {versus(entry['gain'], trained_name, first)}")
        for key, later in (("before_vs_baseline", first), ("after_vs_baseline", trained_name)):
            if key in entry:
                lines.append(f"  {versus(entry[key], later, base_name)}")
    if summary["train_reward"]:
        lines.append("training reward per step: " + " ".join(f"{r:.3f}" for r in summary["train_reward"]))
        lines.append("groups with mixed rewards per step: " + " ".join(f"{m:.2f}" for m in summary["mixed_group_frac"]))
    if trend := summary.get("train_reward_trend"):
        lines.append(f"training reward, first {trend['steps_per_half']} steps {num(trend['first_half'])} -> last "
                     f"{trend['steps_per_half']} {num(trend['second_half'])}: {num(trend['change'], True)} +- "
                     f"{num(trend['stderr'])} (step-to-step spread)")
    if cost := summary.get("cost"):
        line = f"cost: {cost['solved_episodes']:g} solved training episodes"
        if cost.get("solved_episodes"):
            line += (f"; per solved episode {cost['sampled_tokens_per_solved']:,.0f} sampled and "
                     f"{cost['prefilled_tokens_per_solved']:,.0f} prefilled tokens, "
                     f"{cost['sandbox_seconds_per_solved']:,.1f} sandbox-s, {cost['machine_seconds_per_solved']:,.1f} "
                     "machine-s")
            if "money_per_solved" in cost:
                line += f", {cost['money_per_solved']:.4f} {cost['currency']}"
        lines.append(line)
    if "health" in summary:
        fired = summary["health"]
        lines.append("health checks: " + ("none fired" if not fired else "; ".join(
            f"{name} after step(s) {', '.join(map(str, steps))}" for name, steps in fired.items())))
    return lines


def _series(records: list[dict[str, Any]], key: str, kind: str) -> list[tuple[float, float]]:
    return [(float(r["step"]), float(r[key])) for r in records
            if r.get("kind") == kind and isinstance(r.get(key), int | float)]


def load_episodes(run_dir: Path, *, limit: int = MAX_EPISODES) -> list[dict[str, Any]]:
    """Readable episodes of the latest steps (episodes/step_*.jsonl), newest last, at most `limit`."""
    files = sorted((run_dir / "episodes").glob("*.jsonl"))
    episodes: list[dict[str, Any]] = []
    for path in reversed(files):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        episodes[:0] = rows
        if len(episodes) >= limit:
            break
    return episodes[-limit:]


def write_report(run_dir: Path, *, out: Path | None = None) -> Path:
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    config = {}
    if (run_dir / "config.json").is_file():
        config = json.loads((run_dir / "config.json").read_text())
    charts = [_svg_chart(title, {key: _series(records, key, "train")}) for key, title in CHARTS]
    eval_keys = sorted({k for r in records if r.get("kind") == "eval" for k in r if k.endswith("/pass@1")})
    if eval_keys:
        errors = {k.split("/")[1]: dict(_series(records, k + "_stderr", "eval")) for k in eval_keys}
        charts.insert(0, _svg_chart("eval pass@1 (bars: +- one standard error over tasks)",
                                    {k.split("/")[1]: _series(records, k, "eval") for k in eval_keys}, errors=errors))
    episodes = load_episodes(run_dir)
    derived = "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>"
                      for k, v in (config.get("derived") or {}).items())
    summary = _summary_rows(records)
    learning = ""
    if (run_dir / "learning.json").is_file():
        summary_data = json.loads((run_dir / "learning.json").read_text())
        lines = learning_lines(summary_data)
        learning = ("<h2>What it learned</h2>" + "".join(stage_bars(summary_data)) + "<ul>"
                    + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")
    page = _PAGE.format(learning=learning,
        title=html.escape(f"codedojo run {config.get('training_run_id', run_dir.name)}"),
        model=html.escape(str(config.get("model", "?"))), tasks=config.get("tasks", "?"),
        derived=derived, summary=summary, charts="".join(c for c in charts if c) or "<p>No metrics yet.</p>",
        episodes_json=json.dumps(episodes).replace("</", "<\\/"), count=len(episodes),
    )
    target = out or run_dir / "report.html"
    target.write_text(page, encoding="utf-8")
    return target


def _summary_rows(records: list[dict[str, Any]]) -> str:
    rows = []
    for r in records:
        if r.get("kind") == "train":
            rows.append(f"<tr><td>{r['step'] + 1}</td><td>train</td><td>{r.get('rollout/reward_mean', 0):.3f}</td>"
                        f"<td>{r.get('rollout/solved_frac', 0):.3f}</td><td>{r.get('train/loss', 0):+.4f}</td></tr>")
        elif r.get("kind") == "eval":
            vals = ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in r.items()
                             if k.endswith("/pass@1") and isinstance(v, int | float))
            rows.append(f"<tr><td>{r['step']}</td><td>eval</td><td colspan=3>pass@1 {html.escape(vals)}</td></tr>")
    return "".join(rows)


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1a202c; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 12px; }}
.chart {{ border: 1px solid #e2e8f0; background: #fff; }}
.chart .title {{ font-weight: 600; font-size: 12px; }} .chart .tick, .chart .legend {{ font-size: 10px; }}
.chart .axis {{ stroke: #a0aec0; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #e2e8f0; padding: 3px 8px; text-align: left; }}
#episodes tr {{ cursor: pointer; }} #episodes tr:hover {{ background: #f7fafc; }}
pre {{ white-space: pre-wrap; background: #f7fafc; padding: 8px; border-left: 3px solid #cbd5e0; }}
.role {{ font-weight: 600; margin-top: 8px; }}
</style></head><body>
<h1>{title}</h1>
<p>model {model}; {tasks} training tasks</p>
<ul>{derived}</ul>
{learning}
<h2>Curves</h2><div class="charts">{charts}</div>
<h2>Steps</h2><table><tr><th>step</th><th>kind</th><th>reward</th><th>solved</th><th>loss</th></tr>{summary}</table>
<h2>Episodes (<span id="episode-count">{count}</span>)</h2>
<p>status <select id="status-filter"><option value="">all</option></select>
   step <select id="step-filter"><option value="">all</option></select></p>
<table id="episodes"><thead><tr><th>step</th><th>task</th><th>status</th><th>reward</th><th>turns</th></tr></thead>
<tbody></tbody></table>
<div id="episode-view"></div>
<script id="episode-data" type="application/json">{episodes_json}</script>
<script>
const episodes = JSON.parse(document.getElementById("episode-data").textContent);
const body = document.querySelector("#episodes tbody");
const view = document.getElementById("episode-view");
const statusFilter = document.getElementById("status-filter");
const stepFilter = document.getElementById("step-filter");
for (const [select, key] of [[statusFilter, "status"], [stepFilter, "step"]]) {{
  for (const value of [...new Set(episodes.map(e => e[key]))].sort((a, b) => a > b ? 1 : -1)) {{
    const option = document.createElement("option"); option.value = value; option.textContent = value;
    select.appendChild(option);
  }}
  select.addEventListener("change", render);
}}
function show(e) {{
  view.innerHTML = "";
  const head = document.createElement("h3");
  head.textContent = `${{e.task}} (step ${{e.step}}): ${{e.status}}, reward ${{e.reward}}`;
  view.appendChild(head);
  for (const m of e.messages) {{
    const role = document.createElement("div"); role.className = "role"; role.textContent = m.role;
    const text = document.createElement("pre"); text.textContent = m.content;
    view.append(role, text);
  }}
}}
function render() {{
  body.innerHTML = "";
  const shown = episodes.filter(e => (!statusFilter.value || e.status === statusFilter.value) &&
                                     (!stepFilter.value || String(e.step) === stepFilter.value));
  for (const e of shown) {{
    const row = document.createElement("tr"); row.className = "episode-row";
    for (const value of [e.step, e.task, e.status, e.reward, e.turns]) {{
      const cell = document.createElement("td"); cell.textContent = value === null ? "-" : value; row.appendChild(cell);
    }}
    row.addEventListener("click", () => show(e));
    body.appendChild(row);
  }}
  document.getElementById("episode-count").textContent = shown.length;
  if (shown.length) show(shown[0]);
}}
render();
</script></body></html>
"""
