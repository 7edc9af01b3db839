"""Codecs between the V2 / Open Inference Protocol wire formats and the core types."""
