"""Retries with backoff for the API calls a night cannot afford to lose.

A real API server answers 429 (priority and fairness) and 5xx (an apiserver restarting behind
its load balancer), and connections drop; none of that says anything about the test. Create,
delete, read, watch and logs retry those with exponential backoff (honouring ``Retry-After``);
every other answer (403, 404, 409, 422) is returned to the caller at once.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes.client.rest import ApiException

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({0, 429, 500, 502, 503, 504})
#: connection-level failures from urllib3 and the socket layer
CONNECTION_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


def transient(exc: BaseException) -> bool:
    """Worth another try: a throttled or failing API server, or a dropped connection."""
    if isinstance(exc, ApiException):
        return (exc.status or 0) in TRANSIENT_STATUS
    return isinstance(exc, CONNECTION_ERRORS)


def delay_for(exc: BaseException, attempt: int, base_s: float, max_s: float) -> float:
    """Backoff before try ``attempt + 1``: ``Retry-After`` when the server sent one, else exponential with jitter."""
    headers = getattr(exc, "headers", None) or {}
    after = headers.get("Retry-After") if hasattr(headers, "get") else None
    if after:
        try:
            return min(max_s, max(0.0, float(after)))
        except ValueError:
            pass
    return min(max_s, base_s * (2 ** attempt)) * (0.5 + random.random() / 2)


def with_retries(call: Callable[..., T], *args: Any, attempts: int = 6, base_s: float = 0.5, max_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``, retried on transient failures up to ``attempts`` tries in all."""
    for i in range(attempts):
        try:
            return call(*args, **kwargs)
        except (ApiException, *CONNECTION_ERRORS) as exc:
            if not transient(exc) or i == attempts - 1:
                raise
            sleep(delay_for(exc, i, base_s, max_s))
    raise AssertionError("unreachable")  # pragma: no cover


def api_message(exc: ApiException) -> str:
    """The API's own message for an error (its Status body), else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason or "")
    except (ValueError, AttributeError):
        return str(exc.reason or "")
