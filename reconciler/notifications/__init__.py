"""Notifications: tell chat rooms and webhooks what the daemon did, and what a person can do about it.

`settings` is the [notifications] section of the daemon's settings, `events`
what is said, `receivers` how one message reaches one receiver (Apprise),
`dispatch` the queues that keep a slow receiver away from the cycle, and
`hub` the calls the daemon makes where things happen. (Not to be confused
with `reconciler.daemon.notify`, systemd's sd_notify.)
"""
