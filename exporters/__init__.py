"""exporters: where telemetry leaves the process (filled in by its issue)."""
