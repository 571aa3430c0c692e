"""The long-running reconciler: settings, systemd notifications, metrics, HTTP, the main loop."""
