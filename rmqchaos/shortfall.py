"""The one margin for "achieved against asked": a load or a fault that reached less than this share
of what it was asked for fell short, and the verdict says so (chaos/intent.py for faults,
analysis/reconcile/pace.py for the load). It lives in the core because both sides judge by it.

A fault at 80 % of its ask still did what the scenario is about; below it the host (2 shared cores:
8 Redis drivers reached ~6 % of their 200 SET/s), not the setting, decided what happened. The margin
absorbs timing: a 5 s pause stopped by the scheduler's 0.5 s tick, a proxy hop's own 1 ms. A yes/no
effect is 0 or 1, so any margin under 1 reads it the same.
"""
SHORT_BELOW = 0.8
