"""The `rmqchaos` command line: an adapter over the pipeline API. Nothing imports this package."""
