"""Keeping the server up when models fail or run late: circuit breakers, request timeouts."""
