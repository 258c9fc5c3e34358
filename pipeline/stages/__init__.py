"""The stages of one run, each `run(run_dir) -> small JSON-able result`: up, check, load, drain, down,
analyze, report; what every stage does around its work (stage.py) and the machine's one cluster slot
(slot.py).

May import: pipeline.history, pipeline.runs."""
