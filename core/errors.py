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
