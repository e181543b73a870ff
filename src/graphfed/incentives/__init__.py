"""Incentive mechanisms shared by the fairness/incentive algorithms (FGFL and its baselines)."""
