"""Secrets out of what slotune records: argv flags, environment values, log text, records.

Which engine arguments carry secrets is decided once, by :func:`is_secret_arg`: vLLM's own
list (``_SENSITIVE_ARG_FIELDS`` in ``vllm/entrypoints/serve/utils/api_utils.py``:
``api_key``, ``hf_token``, ``watermark_config``), the TLS key's password, and any name
that says it is a secret (``…_token``, ``…password…``, ``…secret…``, ``…_api_key``) —
but not a count of tokens (``max_num_batched_tokens``, ``long_prefill_token_threshold``).
A space refuses such an argument (:mod:`slotune.tuner.spaces`); :func:`redact_record` hides the
value of any that still reaches a stored record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["REDACTED", "SECRET_ARGS", "SECRET_FLAGS", "SECRET_NAME", "argv_secrets",
           "flag_secrets", "is_secret_arg", "redact", "redact_argv", "redact_record",
           "redact_text"]

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|CREDENTIAL)", re.IGNORECASE)
"""Environment variable names whose values are secrets."""
SECRET_ARGS = frozenset({"api_key", "hf_token", "watermark_config", "ssl_keyfile_password"})
"""Engine arguments vLLM itself treats as secrets, and the TLS key's password."""
_SECRET_WORDS = frozenset({"secret", "secrets", "password", "passwd", "credential",
                           "credentials", "apikey"})
_SECRET_ENDINGS = ("_token", "_api_key", "_access_key", "_secret_key", "_private_key")
SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--ssl-keyfile-password"})
"""Spelled as flags (also caught by :func:`is_secret_arg`)."""
REDACTED = "***"


def is_secret_arg(name: str) -> bool:
    """Whether engine argument ``name`` (``api_key`` or ``--api-key``) carries a secret."""
    key = name.strip().lstrip("-").replace("-", "_").lower()
    if key in SECRET_ARGS or key == "token" or key.endswith(_SECRET_ENDINGS):
        return True
    return any(word in _SECRET_WORDS for word in key.split("_"))
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
        if _secret_flag(flag):
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
        if _secret_flag(flag):
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




def _secret_flag(arg: str) -> bool:
    return arg.startswith("--") and is_secret_arg(arg)


_FLAG_IN_TEXT = re.compile(r"(--[A-Za-z][A-Za-z0-9_-]*)(=|[ \t]+)('[^']*'|\"[^\"]*\"|[^\s'\"]+)")


def redact_record(value: Any) -> Any:
    """A JSON value as a record may keep it: the value of every key that names a secret
    argument (``{"api_key": "sk-…"}``, a space's ``fixed`` or a trial's flags) and of every
    secret flag in argv lists and text (``--api-key sk-…``) replaced by :data:`REDACTED`.
    Numbers, booleans and nulls stay (``hf_token: true`` is no secret). The one choke
    point every stored record passes (:class:`slotune.tuner.db.models.RecordJSON`)."""
    if isinstance(value, dict):
        return {key: REDACTED if isinstance(key, str) and is_secret_arg(key)
                and isinstance(value[key], str | dict | list) and value[key]
                else redact_record(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if all(isinstance(item, str) for item in value):
            return [redact_record(item) for item in redact_argv(value)]
        return [redact_record(item) for item in value]
    if isinstance(value, str) and "--" in value:
        return _FLAG_IN_TEXT.sub(
            lambda m: f"{m[1]}{m[2]}{REDACTED}" if is_secret_arg(m[1]) else m[0], value)
    return value
