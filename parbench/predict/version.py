"""The timing models' version, stamped on every prediction: a held-out run is judged only by the
version that was committed before it was measured."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["FINGERPRINT", "MODEL_FILES", "PREDICTOR_VERSION", "fingerprint"]

# Bump on any change to what the models predict (and record the new fingerprint below): the
# held-out runs measured before it can no longer be predicted, and a new one must be drawn.
PREDICTOR_VERSION = 1
# The sources whose every byte is the model: the profile and contention measurements, the
# links, the timing models and which model and profile a record gets.
MODEL_FILES = ("contention.py", "data_parallel.py", "links.py", "models.py", "profile.py",
               "record_profiles.py", "records.py", "schedule_replay.py")
# sha256 of MODEL_FILES at PREDICTOR_VERSION (fingerprint()); a test checks it.
FINGERPRINT = "d40871c46814b0146c2f3dff1da51a0588073f8792a2e17cd77aad67bd75bf93"


def fingerprint() -> str:
    """sha256 over MODEL_FILES' bytes, in order: what FINGERPRINT must equal."""
    digest = hashlib.sha256()
    for name in MODEL_FILES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()
