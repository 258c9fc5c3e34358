"""The scenario spec: one typed YAML document that drives a whole run.

Validated on load. Every error names the file, the line, the dotted key and what is allowed;
unknown keys are errors (a misspelt key silently ignored would make a run test something else).

One module per question, each importing only those above it in this list:
  types      value types (durations, ports, names, config values) and the strict base model
  cluster    the `cluster` section (namesrv, broker groups, proxy, subnet)
  scenario   the other sections (checks, load, consumers, faults) and `Scenario`
  messages   how an error is worded (dotted key, allowed keys) and `SpecError`
  confkeys   RocketMQ config keys: the jars' keys, the platform's own, value types
  majors     what a 4.x release lacks; config keys across two versions (renamed or refused)
  patches    cluster.patches: the files, the backend, the patched release built
  checks     checks beyond field types (config keys, ports, names, faults against their kinds)
  loading    YAML with line numbers, size guards, `extends:` overlays, validation, dumping
Everything public is importable from `rmqchaos.spec`. May import: rmqchaos.rocketmq, rmqchaos.machine
and the root modules (never rmqchaos.run).
"""
from __future__ import annotations

from rmqchaos.spec.types import (CONTROLLER_FOLLOWERS, CONTROLLER_LEADER, MANY, MASTER_OF, SLAVE_OF, SLAVES_OF, ConfValue, Duration, FaultTarget, GroupName, NodeName,
                                 NonNegDuration, Port, Strict, TopicName, is_role, role_group, slave_index,
                                 to_seconds)
from rmqchaos.spec.cluster import Broker, BrokerDefaults, Cluster, Controllers, Jvm, Namesrv, Proxy, Slave
from rmqchaos.spec.scenario import (Checks, ConsumerInstance, Consumers, Fault, FaultKindSpec, Load, Policy, Repeat,
                                    RetryOn, Scenario, Timer, Transaction, WitnessCheck)
from rmqchaos.spec.messages import SpecError
from rmqchaos.spec.confkeys import PLATFORM_BROKER_KEYS, PLATFORM_NAMESRV_KEYS, REMOVED_IN_5, RENAMED_IN_5, config_keys
from rmqchaos.spec.checks import fault_errors, role_error, semantic_errors
from rmqchaos.spec.loading import (MAX_DEPTH, MAX_EXTENDS, MAX_NODES, dump_scenario, load_scenario, parse_scenario,
                                   read_text, resolved_document)
from rmqchaos.spec.majors import across

__all__ = ["CONTROLLER_FOLLOWERS", "CONTROLLER_LEADER", "MANY", "MASTER_OF", "SLAVE_OF", "SLAVES_OF", "ConfValue", "Duration", "to_seconds", "FaultTarget", "GroupName", "NodeName",
           "NonNegDuration", "Port", "Strict", "TopicName", "is_role", "role_group", "slave_index",
           "Broker", "BrokerDefaults", "Cluster", "Controllers", "Jvm", "Namesrv", "Proxy", "Slave",
           "Checks", "ConsumerInstance", "Consumers", "Fault", "FaultKindSpec", "Load", "Policy", "Repeat", "RetryOn",
           "Scenario", "Timer", "Transaction", "WitnessCheck", "SpecError", "PLATFORM_BROKER_KEYS", "PLATFORM_NAMESRV_KEYS", "config_keys",
           "fault_errors", "role_error", "semantic_errors", "MAX_DEPTH", "MAX_EXTENDS", "MAX_NODES", "dump_scenario",
           "load_scenario", "parse_scenario", "read_text", "resolved_document", "RENAMED_IN_5", "REMOVED_IN_5", "across"]
