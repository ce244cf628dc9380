"""Advice: the analysis and the replay together (docs/architecture.md).

`analyze(options)` runs the accounting analysis (`accounting.analyze`), then replays each
recommendation's change(s) on the window's own runs (`effects.py`) and returns the result with
the recommendations' replayed effects filled in. The CLI's `analyze` and `report` call it;
`accounting/` never imports the replay.
"""

from slurmgpu.advice.recommendations import REPLAY_EFFECTS_AUTO_RUNS, analyze, replay_effects

__all__ = ["REPLAY_EFFECTS_AUTO_RUNS", "analyze", "replay_effects"]
