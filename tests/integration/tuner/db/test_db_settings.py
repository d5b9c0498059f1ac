"""Settings: environment names, the embedded default, URL mapping, secrets kept out of logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slotune.tuner.settings import (
    MissingSecret,
    Settings,
    get_settings,
    normalize_database_url,
    redact_url,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("DATABASE_URL", "SLOTUNE_DATABASE_URL", "RAY_ADDRESS", "SLOTUNE_API_TOKEN",
                 "SLOTUNE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_defaults_are_an_embedded_sqlite_file_and_local_ray(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLOTUNE_HOME", str(tmp_path / "home"))
    settings = Settings()
    assert settings.database.url == f"sqlite:///{tmp_path / 'home' / 'slotune.db'}"
    assert settings.ray.address is None
    assert settings.api.token is None
    with pytest.raises(MissingSecret):
        settings.api.require_token()


def test_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://svc:s3cret@db:5432/slotune")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    monkeypatch.setenv("SLOTUNE_API_TOKEN", "tok-123")
    settings = get_settings()
    assert get_settings() is settings  # cached
    assert settings.database.sqlalchemy_url == "postgresql+psycopg://svc:s3cret@db:5432/slotune"
    assert settings.database.optuna_url == settings.database.sqlalchemy_url
    assert settings.ray.address == "ray://head:10001"
    assert settings.api.require_token().get_secret_value() == "tok-123"
    shown = f"{settings!r} {settings}"
    assert "s3cret" not in shown and "tok-123" not in shown


def test_a_bad_database_url_fails_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "not a url")
    with pytest.raises(ValueError, match="not a database URL"):
        Settings()


def test_normalize_and_redact() -> None:
    assert normalize_database_url("postgres://a@h/d") == "postgresql+psycopg://a@h/d"
    assert normalize_database_url("postgresql+psycopg://a@h/d") == "postgresql+psycopg://a@h/d"
    assert redact_url("postgresql://u:pw@h:5/d") == "postgresql://u:***@h:5/d"
    assert "pw" not in redact_url("postgresql://u@h/d?password=pw&sslmode=require")
    assert redact_url("weird text u:pw@host") == "weird text u:pw@host"  # no scheme: as is
    assert redact_url("x://u:pw@host") == "x://u:***@host"
