"""Stage progress written to a log (not a terminal): a plain line a minute and one at the end."""

from __future__ import annotations

import io

from rich.console import Console

from codedojo.progress import stage_progress


def test_a_bar_in_a_log_prints_a_line_a_minute_and_one_at_the_end() -> None:
    out = io.StringIO()
    now = [100.0]
    with stage_progress("sft", console=Console(file=out, width=200), transient=True) as progress:
        progress.get_time = lambda: now[0]  # type: ignore[method-assign]
        bar = progress.add_task("sft", total=5, note="")
        for t, note in ((110.0, "loss 1.2"), (150.0, "loss 0.9"), (161.0, "loss 0.7"), (200.0, "loss 0.5")):
            now[0] = t
            progress.update(bar, advance=1, note=note)
        now[0] = 230.0
        progress.advance(bar)
    assert out.getvalue().splitlines() == ["sft: 3/5 loss 0.7 (61 s)", "sft: 5/5 loss 0.5 (130 s)"]


def test_a_terminal_gets_the_redrawn_bar() -> None:
    progress = stage_progress("x", console=Console(file=io.StringIO(), force_terminal=True))
    assert type(progress).__name__ == "Progress" and not progress.disable
