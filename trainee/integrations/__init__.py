"""Where ML engineers already look: MLflow and W&B export, notifications through Apprise.

Each is an optional extra (``trainee[mlflow]``, ``trainee[wandb]``, ``trainee[notify]``),
imported only by the thread that uses it. A session's integrations run beside it, fed
by the event bus (:class:`trainee.integrations.hub.SessionIntegrations`, one per
running session, started by the session manager); the round loop never waits for
them, and a tracking server or a notification service that fails is a warning.
"""

from __future__ import annotations

from trainee.integrations.hub import SUBSCRIBED_KINDS, SessionIntegrations

__all__ = ["SUBSCRIBED_KINDS", "SessionIntegrations"]
