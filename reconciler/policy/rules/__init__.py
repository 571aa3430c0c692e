"""The rules other than the memory arithmetic, one module per concern.

Each rule is a function `(ctx, settings) -> None` that reports through
`Context.report`; engine.py runs the enabled ones in the order below.
"""
