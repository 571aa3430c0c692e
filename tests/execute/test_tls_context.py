"""The engines' clients share one TLS context that loads no CA (`execute/readiness.py tls_context`).

Engines answer plain HTTP; the context exists so httpx does not load the CA bundle per client. Loading it
even once was 1.7 MB of the daemon's RSS; without it, a certificate can never verify, so an https URL
would fail rather than be trusted unverified.
"""

from __future__ import annotations

import ssl

from reconciler.execute.readiness import tls_context


def test_one_context_without_a_ca_that_still_verifies() -> None:
    context = tls_context()
    assert context is tls_context()
    assert context.cert_store_stats()["x509_ca"] == 0
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
