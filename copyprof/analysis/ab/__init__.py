"""The A/B: two arms' reports compared (what changed, what each measure saw, the verdicts)."""
