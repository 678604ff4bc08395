"""Logging and the service-profiling symbol file."""
