"""rmqchaos: chaos and load tests for Apache RocketMQ (CLI, scenario spec, run directory, stages)."""
