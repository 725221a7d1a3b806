"""Offline tools around runs: comparison plots, ablation series, the difficulty filter."""
