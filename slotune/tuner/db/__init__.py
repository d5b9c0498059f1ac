"""Persistence: SQLAlchemy models, migrations runner, sessions, errors, Optuna storage.

The service layer over all of this is :mod:`slotune.tuner.db.store`.
"""
