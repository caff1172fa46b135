"""Deterministic generators of the committed recordings; run from the repository root.

    python -m scripts.make_transcripts [--check]  # transcripts/refund-*.yaml
    python -m scripts.make_fixtures [--check]     # tests/fixtures/{anthropic,gemini,...}
    python -m scripts.gen_branches [--check]      # transcripts/branches/

``--check`` writes nothing and exits 1 when a committed file differs from what would be
generated. ``wire`` renders a neutral scripted turn in each provider API's wire shape, for all
three; ``branch_answers`` scripts the branches' model answers.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
