"""The reference server's optional API key (`--api-key KEY` or `--api-key-env VAR`; off by default,
as upstream Open-Jev has none).

With a key, every request but GET /health must carry `Authorization: Bearer KEY` (the header the
official SDK and jevcompat send); a missing or wrong key gets 401 `authentication_error` with
`WWW-Authenticate: Bearer` (RFC 6750). The body is this server's error shape, `{"error": {"type",
"message"}}`, beside the peer suite's `{"detail": {"error_type", "message"}}` (jevcompat's
`auth.missing` and `auth.invalid`), both saying the same. /health answers without a key, since
readiness probes carry none, but then only the contract's `status`, `model` and `method`.

The key itself is never printed: errors name the option or the environment variable, never the value.
"""

from __future__ import annotations

import hmac
import os
import re

from ..errors import ReproError

__all__ = ["AUTH_ERROR", "ApiKey"]

AUTH_ERROR = "authentication_error"
_KEY = re.compile(r"[\x21-\x7e]{1,512}")  # visible ASCII: a key travels in an HTTP header


class ApiKey:
    """One API key; `admits(authorization)` checks an Authorization header in constant time."""

    __slots__ = ("_expected", "source")

    def __init__(self, key: str, source: str) -> None:
        if not _KEY.fullmatch(key):
            raise ReproError(f"the API key from {source} must be 1 to 512 visible ASCII characters "
                             "(no spaces or control characters): it travels in an HTTP header.")
        self._expected = f"Bearer {key}".encode()
        self.source = source  # `--api-key` or `$VAR`: what /health and errors may name

    @classmethod
    def from_options(cls, key: str | None, env_var: str | None) -> ApiKey | None:
        """The key given by `--api-key` or named by `--api-key-env`; None when neither is given."""
        if key is not None and env_var is not None:
            raise ReproError("give --api-key or --api-key-env, not both.")
        if env_var is not None:
            value = os.environ.get(env_var)
            if not value:
                raise ReproError(f"--api-key-env {env_var}: the environment variable {env_var} is not set or empty.")
            return cls(value, f"${env_var}")
        return None if key is None else cls(key, "--api-key")

    def admits(self, authorization: str | None) -> bool:
        return authorization is not None and hmac.compare_digest(authorization.strip().encode(), self._expected)

    def refusal(self, authorization: str | None) -> dict[str, dict[str, str]]:
        """The 401 body: why the request was refused, without the key."""
        message = ("this server needs an API key: send `Authorization: Bearer <key>`." if authorization is None
                   else "the API key in the Authorization header is wrong (send `Authorization: Bearer <key>`).")
        return {"error": {"type": AUTH_ERROR, "message": message},
                "detail": {"error_type": AUTH_ERROR, "message": message}}
