"""OpenTelemetry tracing of requests: settings, the per-request timing record and the spans.

``context`` has no OpenTelemetry import, so the data path can check ``TRACING.enabled``
(one attribute read) whether or not the optional ``tracing`` extra is installed; the rest
imports OpenTelemetry and is loaded only when tracing is switched on.
"""
