"""Duration history: every attempt of every test as a sample, stored durably, plus log import."""

from pipelines.core.history.logs import LogAttempt, import_logs, import_parsed, parse_ci_log
from pipelines.core.history.samples import sample_from_attempt
from pipelines.core.history.store import FileHistoryStore, HistoryError, HistoryStore

__all__ = ["FileHistoryStore", "HistoryError", "HistoryStore", "LogAttempt", "import_logs", "import_parsed",
           "parse_ci_log", "sample_from_attempt"]
