"""The live dashboard: a static page (HTML, JS, CSS shipped as package data, no CDN) that
polls a JSON endpoint once a second. Served on the metrics port under ``/dashboard``."""
