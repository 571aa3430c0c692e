"""Tests for reconciler.transport: SSH against an in-process server, and local."""
