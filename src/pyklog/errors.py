"""Errors of the ``pyklog`` facade (:func:`pyklog.register`).

A module of its own, below both the facade (``pyklog/__init__``) and the Spark registration
(:mod:`pyklog.connector.spark.registration`), so that each imports it and neither imports the other
for it.  Imports nothing: ``import pyklog`` stays light.  (The broker's and the clients' errors,
with Kafka's error codes, are in :mod:`pyklog.broker.errors`.)
"""

from __future__ import annotations

__all__ = ["PyklogSetupError"]


class PyklogSetupError(RuntimeError):
    """Spark is set up in a way with which pyklog cannot work; the message says what to change."""
