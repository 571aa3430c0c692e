"""The daemon's dashboard: server-rendered HTML pages over what the daemon already knows.

No build step and no JavaScript: every page is one HTML document with a small
inline style sheet, readable on a phone. Every value is redacted (the
daemon's secret values) and then HTML-escaped before it is written; the page
as a whole is redacted once more on its way out. The figures come from the
layers that compute them (policy budgets, the journal, git history, evidence
files, the upstream gap), never recomputed here.
"""
