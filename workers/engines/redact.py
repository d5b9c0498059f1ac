"""Secrets out of what an engine's trial records: argv flags, environment values, log text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["REDACTED", "SECRET_FLAGS", "SECRET_NAME", "argv_secrets", "flag_secrets",
           "redact", "redact_argv", "redact_text"]

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|CREDENTIAL)", re.IGNORECASE)
SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--ssl-keyfile-password"})
REDACTED = "***"
_SHORTEST_SECRET = 4
"""Shorter values are not hidden: replacing "abc" everywhere would mangle the log."""


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The argv with the values of secret-bearing flags replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_text(text: str, env: Mapping[str, str]) -> str:
    """Hide the values of secret environment variables wherever they appear in ``text``."""
    for name, value in env.items():
        if value and len(value) >= _SHORTEST_SECRET and SECRET_NAME.search(name):
            text = text.replace(value, REDACTED)
    return text


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """Values of secret-bearing flags, to scrub from the engine's log as well."""
    secrets = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq and value:
                secrets.append(value)
            elif i + 1 < len(argv):
                secrets.append(argv[i + 1])
    return [s for s in secrets if len(s) >= _SHORTEST_SECRET]


def flag_secrets(flags: Mapping[str, Any]) -> list[str]:
    """Values of secret-bearing flags given by name (``api_key``), as a spec holds them."""
    return argv_secrets([f"--{name.replace('_', '-')}={value}"
                         for name, value in flags.items() if isinstance(value, str)])


def redact(text: str, env: Mapping[str, str], secrets: Iterable[str] = ()) -> str:
    """``text`` without the secret environment values of ``env`` nor ``secrets``."""
    text = redact_text(text, env)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


