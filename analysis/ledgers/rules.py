"""Classification rules of the reconciliation, in one place (docs/analysis.md explains them).

Per business key, exactly one class, in this precedence:
  unexpected   received, never attempted (counted apart from `keys`: a ledger or key scheme is wrong)
  duplicated   received more than once, whatever the send outcome
  ok           acknowledged and received exactly once
  recovered    received exactly once, never acknowledged (every attempt failed or timed out)
  lost         acknowledged (any stored status) and never received
  failed       every attempt a definite rejection, never received
  indeterminate  otherwise: some attempt's outcome is unknown, never received — never called lost
  undelivered_at_stop  what would be `lost`, in a run whose receive side is not complete (the drain
               did not reach lag 0, or a consumer did not stop cleanly): not verified, never lost
               (analysis/judge/completeness.py has the rule)
  not_committed  a transactional load's half message, acknowledged, that the application did not
               commit (rolled back, or never resolved) and that was never delivered: never meant to be
               delivered, never lost (analysis/contracts/transactions.py says which)
"""
from __future__ import annotations

# the statuses, busy texts and duplicate causes are the figure names' (rmqchaos/spec/expect.py): one source
from rmqchaos.spec.expect import BUSY_TEXTS, DUPLICATE_CAUSES, SEND_STATUSES

CLASSES = ("ok", "lost", "duplicated", "recovered", "failed", "indeterminate", "undelivered_at_stop", "not_committed")

# Stored answers (MQClientAPIImpl.processSendResponse, 5.5.0). Everything but SEND_OK is "weak".
STORED_STATUSES = SEND_STATUSES
WEAK_STATUSES = tuple(x for x in SEND_STATUSES if x != "SEND_OK")

# Response codes the broker (or namesrv) sends only before appending: a definite rejection.
#  2 SYSTEM_BUSY: every busy text ([REJECTREQUEST], [OVERLOAD], [PCBUSY_CLEAN_QUEUE],
#    [TIMEOUT_CLEAN_QUEUE], [PC_SYNCHRONIZED]) is answered before the put (NettyRemotingAbstract,
#    BrokerFastFailure, HookUtils; docs/protocol.md)
# 13 MESSAGE_ILLEGAL (size/properties checks before the put, SendMessageProcessor)
# 14 SERVICE_NOT_AVAILABLE (store not writable / shutting down, checked before the put)
# 16 NO_PERMISSION (topic or broker not writable, AbstractSendMessageProcessor.msgCheck)
# 17 TOPIC_NOT_EXIST (msgCheck, or namesrv without a route: nothing was sent)
# 29 INVALID_PARAMETER (request header checks)
# Code 1 SYSTEM_ERROR is not here: it also comes from exceptions after the append began.
DEFINITE_REJECT_CODES = (2, 13, 14, 16, 17, 29)

# Remark prefixes reported apart (code 2 texts).
BUSY_PREFIXES = tuple(f"[{t}]" for t in BUSY_TEXTS)
REMARK_PREFIX_REGEX = r"^(\[[A-Z_]+\])"

# Causes of extra deliveries of a duplicated key (each extra delivery gets exactly one):
#  consumer_retry   a redelivery through %RETRY%<group> (reconsume times > 0)
#  backup_topic     the key stored in another topic too (a resend to the backup topic)
#  producer_resend  another stored copy in the same topic, and the key had several attempts there
#  consumer_repull  the same stored copy delivered again (offsets not committed before a
#                   rebalance or restart)
#  transaction_recommit  another stored copy of a transactional key committed more than once (the
#                   broker asked about it after the application's own end, or it answered commit to
#                   several check-backs, each about another re-appended copy of the half)
#  timer_reput      another stored copy of a timer message after a single attempt: the broker's wheel
#                   put it into its topic more than once (seen after a kill -9 and restart)
#  unexplained      another stored copy in the same topic with one attempt only
# DUPLICATE_CAUSES (imported above: the figures' duplicates.<cause>) lists them in this order.
