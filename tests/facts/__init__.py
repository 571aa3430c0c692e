"""Tests of reconciler.facts: builders, recorded outputs, and the host-side scripts run for real."""
