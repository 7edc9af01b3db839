"""Model lifecycle: loading, reloading and unloading models while serving (docs/lifecycle.md)."""
