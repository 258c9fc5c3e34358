"""The pipeline: the only API the CLI, the Airflow DAGs and the tests call.

    stages/     the stages of one run, each `run(run_dir) -> small JSON-able result` against a run
                directory that holds all state (so an Airflow task, a person or a test can run one on
                its own): up, check, load, drain, down, analyze, report; stage.py (what every stage
                does around its work), slot.py (the machine's one cluster slot)
    scenario.py one scenario end to end: the stage order and the failure policy
    runs.py     create, open and reap runs
    compose.py  `rmqchaos compose render`: docker-compose.yml for a scenario
    history/    what is known across runs: trends and regression flags from the run history, what an
                explored run found
    workflows/  whole workflows over many runs: the nightly matrix, the pre-release test (its Params,
                gates, baseline comparison, maximum-rate search), the upstream corpus, bisection,
                exploration and shrinking, the upstream report

They import only downward: workflows, then scenario and compose, stages, history, runs
(pyproject.toml [tool.importlinter]).
"""
