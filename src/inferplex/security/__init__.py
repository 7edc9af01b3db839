"""Keeping out whoever does not belong: API tokens with scopes, a separate management surface,
TLS settings, header limits and model encryption at rest."""
