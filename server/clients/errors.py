"""The clients' errors (no HTTP library imported here: commands load it only when they
send). Each command prints one and exits 1, or 2 for a usage or local file problem.

::

    ClientError                 a request to the coordinator failed, or cannot be sent
     +-- UnreachableError        the coordinator did not answer (client.py)
     +-- UnexpectedAnswerError   an answer the API does not document (client.py)
     +-- ApiError                an error status; ``message`` is its detail (client.py)
     +-- UsageError              arguments the API's models refuse (transfer_cli.py)
     +-- UploadError             a local file or token file problem (campaign_upload.py)
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["ClientError"]


class ClientError(ReservoirError):
    """A request to the coordinator failed; ``str()`` is one line for the user."""
