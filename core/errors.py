"""Every error wakeful raises, in one hierarchy. Messages say what to do next."""

from __future__ import annotations


class WakefulError(Exception):
    """Base of every error wakeful raises on purpose."""


class ConfigError(WakefulError):
    """A setting is missing or malformed; the message names the variable to fix."""

    def __init__(self, setting: str, problem: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {problem}")


class StackError(WakefulError):
    """A local server could not be installed, started, reached or stopped."""

    def __init__(self, server: str, problem: str, log_tail: str = "") -> None:
        self.server = server
        self.log_tail = log_tail
        text = f"{server}: {problem}"
        if log_tail:
            text += f"\n--- last lines of the {server} log ---\n{log_tail}"
        super().__init__(text)


class ServerUnavailable(WakefulError):
    """Kafka or Redis did not answer at the configured address."""

    def __init__(self, server: str, address: str, hint: str) -> None:
        self.server = server
        self.address = address
        super().__init__(f"{server} is not reachable at {address}. {hint}")


class DecodeError(WakefulError):
    """Bytes that are not a valid record of the expected kind; carries the raw input and cause."""

    def __init__(self, kind: str, raw: bytes, reason: str) -> None:
        self.kind = kind
        self.raw = raw
        self.reason = reason
        super().__init__(f"malformed {kind}: {reason}")


class UnknownSchemaVersion(DecodeError):
    """A record written by newer code than this; upgrade this worker before it reads the record."""

    def __init__(self, kind: str, version: int, known: int, raw: bytes) -> None:
        self.version = version
        self.known = known
        WakefulError.__init__(
            self,
            f"{kind} has schema_version {version}, but this code knows up to {known}: "
            "deploy the newer wakeful on this worker; the record was left untouched",
        )
        self.kind = kind
        self.raw = raw
        self.reason = f"schema_version {version} > {known}"


class IllegalTransition(WakefulError):
    """A stage change the workflow's transition table does not allow; nothing was written."""

    def __init__(self, task_id: str, old: str, new: str) -> None:
        self.task_id = task_id
        self.old = old
        self.new = new
        super().__init__(f"task {task_id}: {old} -> {new} is not an allowed transition")


class KeyringError(WakefulError):
    """The sealing keyring is missing, malformed, or lacks a key id a stored blob names."""


class StateError(WakefulError):
    """Base of errors about one task's stored state; carries the task id."""

    def __init__(self, task_id: str, message: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id}: {message}")


class TaskNotFound(StateError):
    """No checkpoint is stored for this task id."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id, "no such task")


class TaskExists(StateError):
    """create() was asked for a task id that already has state."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id, "already exists; pick another task id")


class IntegrityError(StateError):
    """The stored state failed verification; the task is quarantined and never resumes."""

    reason_code = "integrity"

    def __init__(self, task_id: str, detail: str) -> None:
        self.detail = detail
        super().__init__(task_id, f"{self.reason_code}: {detail}; quarantined for an operator")


class TamperedState(IntegrityError):
    """The sealed blob's MAC does not verify: edited bytes, or a blob re-sealed without the key."""

    reason_code = "tampered"


class MisplacedState(IntegrityError):
    """The blob under this task's key was sealed for another task."""

    reason_code = "misplaced"


class RollbackDetected(IntegrityError):
    """A valid but older blob: its version is behind the task's monotonic counter."""

    reason_code = "rollback"


class UnreadableState(IntegrityError):
    """The blob verifies, but no code here can read its schema version (newer, or no migration path)."""

    reason_code = "schema"


class TaskQuarantined(StateError):
    """The task was quarantined earlier; it stays parked until an operator acts."""

    def __init__(self, task_id: str, reason: str) -> None:
        self.reason = reason
        super().__init__(task_id, f"quarantined ({reason}); it will not resume")


class StaleVersion(StateError):
    """The caller decided on an older state_version than the stored one; re-read and re-decide."""

    def __init__(self, task_id: str, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(task_id, f"expected state_version {expected}, found {actual}")


class Contention(StateError):
    """Compare-and-swap kept losing races past the retry bound; back off and retry the message."""

    def __init__(self, task_id: str, attempts: int) -> None:
        self.attempts = attempts
        super().__init__(task_id, f"lost {attempts} compare-and-swap races in a row")


class LeaseLost(StateError):
    """The caller no longer holds the task's lease (expired or taken); it must stop writing."""

    def __init__(self, task_id: str, token: str, detail: str = "") -> None:
        self.token = token
        super().__init__(task_id, f"lease {token} is no longer held{': ' + detail if detail else ''}")


class LeaseBusy(StateError):
    """Another worker holds the task's lease; retry after it expires or is released."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id, "lease held by another worker")


class PermissionRefused(WakefulError):
    """Redis refused a command for this role's ACL user (NOPERM), or the role is misconfigured."""


class MissingCredential(PermissionRefused):
    """A role has no usable Redis credential in its own secrets folder; carries the role."""

    def __init__(self, role: str, problem: str) -> None:
        self.role = role
        super().__init__(problem)


class ActionError(WakefulError):
    """The action log refused an update (no intent recorded for the key, or a stale writer)."""

    def __init__(self, op_key: str, problem: str) -> None:
        self.op_key = op_key
        super().__init__(f"operation {op_key}: {problem}")


class DownstreamError(WakefulError):
    """A downstream system refused one operation; carries the op key and the task id."""

    def __init__(self, op_key: str, task_id: str, problem: str) -> None:
        self.op_key = op_key
        self.task_id = task_id
        super().__init__(f"operation {op_key} (task {task_id}): {problem}")


class FencedOff(DownstreamError):
    """The downstream has seen a newer fencing token for the task; the caller's lease is stale."""

    def __init__(self, op_key: str, task_id: str, fence: int, seen: int) -> None:
        self.fence = fence
        self.seen = seen
        super().__init__(
            op_key,
            task_id,
            f"fence {fence} is older than fence {seen} already seen downstream; nothing was done: "
            "this worker lost the lease and must stop, the current holder will act",
        )


class DownstreamUnavailable(DownstreamError):
    """The downstream failed transiently and did nothing; retry with the same op key."""

    def __init__(self, op_key: str, task_id: str, detail: str) -> None:
        self.detail = detail
        super().__init__(
            op_key,
            task_id,
            f"downstream unavailable ({detail}); nothing was done: retry with the same op key, "
            "within the retry limit",
        )


class DownstreamRefused(DownstreamError):
    """The downstream refused the operation for good and did nothing; a retry cannot help."""

    def __init__(self, op_key: str, task_id: str, detail: str) -> None:
        self.detail = detail
        super().__init__(op_key, task_id, f"refused for good ({detail}); nothing was done: do not retry")


class PublishError(WakefulError):
    """An event was refused before sending, or the broker did not acknowledge it; carries event ids."""

    def __init__(self, event_ids: tuple[str, ...], problem: str, *, retryable: bool) -> None:
        self.event_ids = event_ids
        self.retryable = retryable
        shown = ", ".join(event_ids[:3]) + (f" (+{len(event_ids) - 3} more)" if len(event_ids) > 3 else "")
        super().__init__(f"event {shown}: {problem}")


class Stopping(WakefulError):
    """The role was told to stop in the middle of a batch; the batch's offsets were not stored, so
    the next process reads it again."""

    def __init__(self, role: str) -> None:
        self.role = role
        super().__init__(f"{role}: stopping; the unfinished batch is read again on the next start")


class KafkaClientFailed(WakefulError):
    """The Kafka client hit a fatal error and can deliver nothing more; the process exits so that a
    new one (the supervisor restarts it) starts over with a new client."""

    def __init__(self, role: str, error: str) -> None:
        self.role = role
        self.error = error
        super().__init__(f"{role}: the Kafka client failed for good ({error}); restart the process")
