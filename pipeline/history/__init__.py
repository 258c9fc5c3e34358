"""What is known across runs: each run's trends and regression flags from the run history (trends.py),
what an explored run found and whether it is worth keeping (explored.py).

May import: pipeline.runs."""
