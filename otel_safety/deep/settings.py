"""Where the deep analysis sends trace content, resolved once and checked up front.

Nothing is sent unless `deep` is on (OTEL_SAFETY_DEEP) and an endpoint is named: the
OpenAI default host is never assumed, so an application that happens to have
OPENAI_API_KEY set for its own calls does not start shipping its traces anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from otel_safety.config import ConfigError, Settings
from otel_safety.deep.prompt import Prompt, load_prompt
from otel_safety.extras import install_hint

# The OpenAI client's own variables, used when the OTEL_SAFETY_DEEP_* settings leave them out.
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
API_KEY_VARIABLE = "OPENAI_API_KEY"
NO_KEY = "none"  # a local server needs no key, but the client wants one


@dataclass(frozen=True)
class DeepConfig:
    """The deep tier's endpoint and limits; `api_key` is never printed (see `describe`)."""

    base_url: str
    model: str
    api_key: str = field(repr=False)
    timeout: float
    retries: int
    max_tokens: int
    field_chars: int
    fail_closed: bool
    prompt: Prompt


def deep_config(settings: Settings, environ: Mapping[str, str] | None = None) -> DeepConfig | None:
    """The configuration when deep analysis is on, None when off; a ConfigError naming the
    variable to set when it is on but cannot work. `environ` (os.environ when None) is read
    for the OpenAI client's variables only."""
    if not settings.deep:
        return None
    environ = os.environ if environ is None else environ
    base_url = settings.deep_base_url or environ.get(BASE_URL_VARIABLE, "").strip()
    if not base_url:
        raise ConfigError(
            "OTEL_SAFETY_DEEP is on but no endpoint is set: set OTEL_SAFETY_DEEP_BASE_URL "
            "(or OPENAI_BASE_URL) to an OpenAI-compatible URL such as http://127.0.0.1:8000/v1"
        )
    if urlsplit(base_url).scheme not in ("http", "https"):
        raise ConfigError(f"deep analysis endpoint {base_url!r} is not an http(s) URL")
    if not settings.deep_model:
        raise ConfigError(
            "OTEL_SAFETY_DEEP is on but no model is named: set OTEL_SAFETY_DEEP_MODEL"
        )
    own_key = settings.deep_api_key.get_secret_value().strip() if settings.deep_api_key else ""
    api_key = own_key or environ.get(API_KEY_VARIABLE, "").strip() or NO_KEY
    _require_client()
    return DeepConfig(
        base_url=base_url,
        model=settings.deep_model,
        api_key=api_key.strip(),
        timeout=settings.deep_timeout,
        retries=settings.deep_retries,
        max_tokens=settings.deep_max_tokens,
        field_chars=settings.deep_field_chars,
        fail_closed=settings.deep_fail_closed,
        prompt=load_prompt(),
    )


def describe(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """One line for `status`: off, or which model at which host (never the key)."""
    if not settings.deep:
        return "off (OTEL_SAFETY_DEEP is not set): no trace content is sent anywhere"
    try:
        config = deep_config(settings, environ)
    except ConfigError as exc:
        return f"misconfigured: {exc}"
    assert config is not None
    keyed = "with an API key" if config.api_key != NO_KEY else "without an API key"
    return (
        f"on: model {config.model} at {_without_credentials(config.base_url)} ({keyed}), "
        f"prompt {config.prompt.version}"
    )


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _require_client() -> None:
    try:
        import openai  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"deep analysis needs the openai client: {install_hint('deep')}"
        ) from None
